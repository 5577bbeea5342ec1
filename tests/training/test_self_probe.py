"""train-router --router self-probe on the toy world (shipped pair, a slice of the bundled labels): trains,
registers, and serves through RoutedVLM with one large_direct pass per request, whose hidden state is exactly the
training input of the same sample."""
import json

import numpy as np
import pytest

from routedvlm.errors import ConfigError
from routedvlm.router import load_router
from routedvlm.router.self_probe import HIDDEN_KEY, SelfProbeRouter
from routedvlm.training.config import TrainConfig

N_ROWS = 300


@pytest.fixture(scope="module")
def toy_slice(tmp_path_factory):
    """The first N_ROWS of the bundled toy labels, written as a labels file (its metadata keeps the sample source
    and the shipped models), in a fresh working folder."""
    from routedvlm.data.labels.schema import write_labels
    from routedvlm.training.labels_io import embedded_labels_path, load_labels

    root = tmp_path_factory.mktemp("self-probe")
    labels, meta = load_labels(embedded_labels_path())
    keep = {k: v for k, v in meta.items() if k not in ("source_path", "embedded", "failed_rows", "content_hash")}
    path = write_labels(labels.head(N_ROWS).reset_index(drop=True), root / "labels.parquet", keep)
    return {"root": root, "labels": path}


@pytest.fixture(scope="module")
def trained(toy_slice):
    from routedvlm.training.labels_io import load_labels
    from routedvlm.training.pipeline import train_router

    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(toy_slice["root"])  # the toy split behind the labels is regenerated under ./runs
        labels, meta = load_labels(toy_slice["labels"])
        config = TrainConfig(router="self-probe", data=str(toy_slice["labels"]), output_dir="run", no_mlflow=True,
                             num_boost_round=40,
                             target_accuracy=0.9)  # 60 calibration rows certify 0.9, not the default 0.95
        return train_router(config, labels, meta), toy_slice["root"]


@pytest.mark.slow
def test_trains_saves_and_beats_nothing_it_did_not_measure(trained):
    result, root = trained
    router = result.router
    assert isinstance(router, SelfProbeRouter) and router.policy.mode == "cascade"
    hidden = router.policy.params["hidden"]
    assert hidden["layers"] == [2] and hidden["position"] == "all_mean"  # 2/3 of the large model's 4 layers
    assert hidden["size"] == router.head["weight"].shape[0] - len(router.policy.features)
    assert router.policy.params["recomputed"]["answers_equal_labels"] == N_ROWS  # same model, same answers
    ev = json.loads((root / "run" / "evaluation.json").read_text())
    assert set(ev["auroc_large_direct"]) == {"self-probe", "lightgbm"}
    assert all(0.0 <= v <= 1.0 for v in ev["auroc_large_direct"].values())
    names = [r["name"] for r in ev["rows"]]
    assert any(n.startswith("lightgbm chosen: ") for n in names) and names[-1].startswith("chosen: ")
    assert ev["certificate"]["feasible"] and ev["comparison"]["lightgbm"]["certificate"]["router_mode"] == "cascade"
    loaded = load_router(root / "run" / "router")
    test = result.test
    assert [d.to_dict() for d in loaded.decide_batch(test)] == [d.to_dict() for d in router.decide_batch(test)]


@pytest.mark.slow
def test_routedvlm_reads_the_hidden_state_of_its_own_large_direct_pass(trained):
    from routedvlm.data.toyworld.make_labels import default_checkpoints
    from routedvlm.inference import RoutedVLM

    result, root = trained
    ck = default_checkpoints()
    vlm = RoutedVLM.from_pretrained(small=str(ck / "small"), large=str(ck / "large"), router=str(root / "run" / "router"),
                                    k_grid=(4, 8, 16), max_direct_tokens=8, max_reason_tokens=48)
    assert vlm.router is not None, vlm.router_error
    for _, row in result.test.head(4).iterrows():
        out = vlm(image=row["image"], question=row["question"])
        assert out.decision["fallback"] is False and out.decision["error"] is None
        before = [r["stage"] for r in out.trace[: out.trace.index(out.decision)]]
        assert before.count("large_direct") == 1 and "small_direct" not in before  # one pass, nothing extra
        np.testing.assert_allclose(vlm.router.last_input, row[HIDDEN_KEY], atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_cli_registers_the_self_probe_and_a_remote_large_side_is_refused(toy_slice, monkeypatch, capsys):
    import types

    from routedvlm.inference.routed import RoutedVLM
    from routedvlm.training.cli import main

    monkeypatch.chdir(toy_slice["root"])
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    argv = ["train", "--router", "self-probe", "--data", str(toy_slice["labels"]),
            "--hidden-layers", "-1", "--hidden-position", "prompt_last", "--num-boost-round", "40", "--target-accuracy", "0.9",
            "--output-dir", "cli-run", "--register-as", "self-probe-router"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "registered self-probe-router version 1" in out and "lightgbm chosen: " in out
    uri = f"sqlite:///{toy_slice['root']}/mlruns/mlflow.db"
    router = load_router("models:/self-probe-router/1", tracking_uri=uri)  # champion only if certified
    assert isinstance(router, SelfProbeRouter)
    assert router.policy.params["hidden"]["layers"] == [3] and router.policy.params["hidden"]["position"] == "prompt_last"
    remote = types.SimpleNamespace(small=types.SimpleNamespace(remote=True), large=types.SimpleNamespace(
        remote=True, name="http://127.0.0.1:8101/v1#toy-large"))
    vlm = RoutedVLM(remote, router)
    assert vlm.router is None and "vLLM and SGLang return no hidden states" in vlm.router_error


def test_one_shot_self_probe_is_refused():
    with pytest.raises(ConfigError, match=r"the self-probe reads the large_direct pass, which only `mode` 'cascade'"):
        TrainConfig(router="self-probe", mode="one-shot")
    with pytest.raises(ConfigError, match=r"`hidden_layers` must be comma-separated integers"):
        TrainConfig(router="self-probe", hidden_layers="last")
