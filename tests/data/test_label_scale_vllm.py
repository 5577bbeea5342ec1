"""`routedvlm label` at scale against the toy pair's REAL vLLM servers (marked `vllm`; `make vllm-env vllm-up`):
concurrency 8 gives the labels of concurrency 1, priced by a profile that `routedvlm profile --model URL#ID` measured
on the same servers the latencies are identical too; without it they are recorded as batched; Ray workers with remote
sides give the same labels."""
import json
import time

import pytest

pytestmark = pytest.mark.vllm
N = 12


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory):
    from routedvlm.data.toyworld.make_labels import write_split

    seed = int(time.time()) % 100_000 + 3  # prompts the servers have not served yet
    return write_split("eval", N, seed, tmp_path_factory.mktemp("toy-scale"))


@pytest.fixture(scope="module")
def profile(vllm_servers, tmp_path_factory):
    from routedvlm.inference.profiling.cli import main

    out = tmp_path_factory.mktemp("profile") / "profile.json"
    assert main(["--model", vllm_servers["small"], "--model", vllm_servers["large"], "--image-sizes", "96x16",
                 "--prompt-tokens", "8,32", "--output-tokens", "1,8,16", "--repeats", "1", "--out", str(out),
                 "--no-progress"]) == 0
    return out


def _label(data, out, servers, *extra):
    from routedvlm.data.labels.schema import read_labels
    from routedvlm.data.toyworld.make_labels import MAX_DIRECT_TOKENS, MAX_REASON_TOKENS
    from routedvlm.cli import main

    argv = ["label", "--small", servers["small"], "--large", servers["large"], "--dataset", str(data), "--adapter",
            "toyworld", "--out", str(out), "--k-grid", "4,8,16", "--max-new-tokens", str(MAX_DIRECT_TOKENS),
            "--max-reason-tokens", str(MAX_REASON_TOKENS), "--no-progress", *extra]
    assert main(argv) == 0
    df, meta = read_labels(out)
    return df.set_index("sample_id").sort_index(), meta


def _columns(df, prefixes=("answer__", "correct__", "output_tokens__", "feat__")):
    return [c for c in df.columns if c.startswith(prefixes)]


def test_concurrency_8_labels_like_1_and_a_server_profile_prices_both_alike(vllm_servers, toy_data, profile, tmp_path):
    one, meta1 = _label(toy_data, tmp_path / "c1.parquet", vllm_servers, "--concurrency", "1", "--cost", str(profile))
    eight, meta8 = _label(toy_data, tmp_path / "c8.parquet", vllm_servers, "--concurrency", "8", "--cost", str(profile))
    assert eight["error"].isna().all() and len(eight) == N
    cols = _columns(one)
    assert len(cols) > 20
    for col in cols:
        assert eight[col].tolist() == pytest.approx(one[col].tolist(), abs=1e-6), col
    lat = _columns(one, ("latency_ms__",))
    assert eight[lat].equals(one[lat])  # token counts priced by the profile: the same at any concurrency
    assert (meta1["latency_source"], meta8["latency_source"], meta8["requests_in_flight"]) == ("cost-model", "cost-model", 8)
    entry = json.loads(profile.read_text())["models"]["toy-large"]
    assert entry["remote"]["requests_in_flight"] == 1 and len(entry["measurements"]["decode"]) >= 2


def test_without_a_profile_batched_latencies_are_recorded_as_such(vllm_servers, toy_data, tmp_path):
    df, meta = _label(toy_data, tmp_path / "batched.parquet", vllm_servers, "--limit", "4")  # default: 32 in flight
    assert (meta["latency_source"], meta["concurrency"], meta["requests_in_flight"]) == ("batched-wall-clock", 32, 32)


@pytest.mark.slow
def test_ray_workers_with_remote_sides_label_like_a_plain_run(vllm_servers, toy_data, tmp_path):
    import ray

    plain, _ = _label(toy_data, tmp_path / "plain.parquet", vllm_servers, "--concurrency", "1")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        on_ray, meta = _label(toy_data, tmp_path / "ray.parquet", vllm_servers, "--ray", "--num-workers", "2",
                              "--concurrency", "2")
    finally:
        ray.shutdown()
    for col in _columns(plain):
        assert on_ray[col].tolist() == pytest.approx(plain[col].tolist(), abs=1e-6), col
    assert (meta["runner"], meta["requests_in_flight"], meta["latency_source"]) == ("ray", 4, "batched-wall-clock")
