"""`routedvlm label` with both sides on REAL vLLM servers (`make vllm-env vllm-up`; marked `vllm`): the labels equal a
local labelling run of the same samples, the metadata names the servers and model ids, and the escalation columns
show the reuse of the large model's cached prefix instead of repeating the one-stage cost."""
import json

import pytest

pytestmark = pytest.mark.vllm
N = 20


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory):
    from routedvlm.data.toyworld.make_labels import write_split

    return write_split("eval", N, 13, tmp_path_factory.mktemp("toy-data"))  # labelling calls are cache-salted


def _label(data, out, small, large, *extra):
    from routedvlm.data.labels.schema import read_labels
    from routedvlm.data.toyworld.make_labels import MAX_DIRECT_TOKENS, MAX_REASON_TOKENS
    from routedvlm.cli import main

    argv = ["label", "--small", small, "--large", large, "--dataset", str(data), "--adapter", "toyworld", "--out",
            str(out), "--k-grid", "4,8,16", "--max-new-tokens", str(MAX_DIRECT_TOKENS), "--max-reason-tokens",
            str(MAX_REASON_TOKENS), "--device", "cpu", "--no-progress", *extra]
    assert main(argv) == 0
    return read_labels(out)


@pytest.fixture(scope="module")
def both(vllm_servers, toy_data, tmp_path_factory):
    from routedvlm.data.toyworld.make_labels import checkpoint_pair

    root = tmp_path_factory.mktemp("labels")
    small, large = (str(p) for p in checkpoint_pair())
    local = _label(toy_data, root / "local.parquet", small, large)
    remote = _label(toy_data, root / "vllm.parquet", vllm_servers["small"], vllm_servers["large"])
    return local, remote


def test_labels_over_vllm_equal_a_local_labelling_run(both):
    (local, _), (remote, meta) = both
    assert remote["error"].isna().all(), remote["error"].dropna().tolist()
    assert list(remote["sample_id"]) == list(local["sample_id"]) and len(remote) == N
    compared = [c for c in local.columns if c.startswith(("answer__", "correct__", "output_tokens__")) or c == "label"]
    assert len(compared) > 20
    for col in compared:
        if col != "label":  # the cheapest correct strategy also depends on the two runs' latencies
            assert remote[col].tolist() == local[col].tolist(), col
    feats = [c for c in local.columns if c.startswith("feat__") and "entropy" not in c]
    for col in feats:  # the same features (the entropy ones come from top-5 logprobs over HTTP)
        assert remote[col].tolist() == pytest.approx(local[col].tolist(), abs=1e-4), col


def test_labels_metadata_records_the_servers_and_model_ids(both, vllm_servers):
    (_, local_meta), (_, meta) = both
    for side in ("small", "large"):
        m = meta["models"][side]
        url, model_id = vllm_servers[side].split("#")
        assert (m["server"], m["model_id"], m["device"], m["dtype"]) == (url, model_id, "remote", None)
        assert m["served"]["id"] == model_id and m["served"]["max_model_len"] >= 2048
        assert m["revision"] == local_meta["models"][side]["revision"]  # the served folder is the shipped checkpoint
    assert meta["remote_sides"] == ["small", "large"] and "cache_salt" in meta["remote_measurement"]
    json.dumps(meta)


def test_escalation_columns_show_the_reuse(both):
    """Wall clock: the two-stage increment never exceeds the one-stage cost (each measured, the cold one in a fresh
    prefix-cache namespace). The deterministic check with a cost model is the next test."""
    _, (remote, _) = both
    for k in ("4", "8", "16", "all"):
        assert (remote[f"latency_ms__escalate_{k}"] <= remote[f"latency_ms__transfer_{k}"] + 1e-9).all()


def test_cost_model_prices_escalations_on_the_uncached_tokens(vllm_servers, toy_data, tmp_path):
    from test_label_cost import _profile

    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(_profile("small-path", "large-path")))
    df, meta = _label(toy_data, tmp_path / "cost.parquet", vllm_servers["small"], vllm_servers["large"],
                      "--cost", str(profile), "--cost-model-small", "tiny-small", "--cost-model-large", "tiny-large",
                      "--limit", "4")
    assert meta["latency_source"] == "cost-model"
    for k in ("4", "8", "16", "all"):
        saved = df[f"latency_ms__transfer_{k}"] - df[f"latency_ms__escalate_{k}"]
        # the large model's vision encoder (6 image tokens, as vLLM reports) and the prefill of the 32 reused tokens
        assert saved.tolist() == pytest.approx([4 * (2 + 0.5 * 6) + 4 * (1 + 0.1 * 32)] * 4, abs=1e-6)
