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
    """The first N_ROWS of the bundled toy labels, cut with pyarrow as a user would (the `routedvlm` metadata is
    kept as it is: relative model paths and weights hashes), in a fresh working folder outside the checkout —
    the labels' recorded paths do not exist there, so the models are found by their weights hash."""
    import pyarrow.parquet as pq

    from routedvlm.training.labels_io import embedded_labels_path

    root = tmp_path_factory.mktemp("self-probe")
    table = pq.read_table(embedded_labels_path())
    path = root / "labels.parquet"
    pq.write_table(table.slice(0, N_ROWS), path)
    return {"root": root, "labels": path}


@pytest.fixture(scope="module")
def trained(toy_slice):
    from routedvlm.training.labels_io import load_labels
    from routedvlm.training.pipeline import train_router

    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(toy_slice["root"])  # the toy split behind the labels is regenerated under ./runs
        labels, meta = load_labels("labels.parquet")
        config = TrainConfig(router="self-probe", data="labels.parquet", output_dir="run", no_mlflow=True,
                             num_boost_round=40, relative_loss="regret",
                             target_accuracy=0.9)  # 60 calibration rows certify 0.9, not the default 0.95
        # the regret: under the (default) difference, "always transfer_all" is certified on this slice and faster
        # than any probe rule (a fixed rule, reported as such); these tests are about the probe being the rule
        return train_router(config, labels, meta), toy_slice["root"]


@pytest.mark.slow
def test_trains_saves_and_beats_nothing_it_did_not_measure(trained):
    result, root = trained
    router = result.router
    assert isinstance(router, SelfProbeRouter) and router.policy.mode == "cascade"
    hidden = router.policy.params["hidden"]
    # one of the candidate layers (1/3, 1/2, 2/3, last of 4 -> 1, 2, 3), chosen on the training rows
    assert hidden["layers"][0] in (1, 2, 3) and len(hidden["layers"]) == 1 and hidden["position"] == "all_mean"
    assert set(hidden["layer_cv_log_loss"]) == {"1", "2", "3"}
    assert hidden["layer_cv_log_loss"][str(hidden["layers"][0])] == min(hidden["layer_cv_log_loss"].values())
    assert hidden["size"] == router.head["weight"].shape[0] - len(router.policy.features)
    assert router.policy.params["recomputed"]["answers_equal_labels"] == N_ROWS  # same model, same answers
    ev = json.loads((root / "run" / "evaluation.json").read_text())
    assert set(ev["auroc_large_direct"]) == {"self-probe", "lightgbm"}
    # the hidden state of the large model's own short answer tells a right answer from a wrong one far better than
    # chance on held-out rows (0.5), as the tabular features do (toy world: about 0.93 both)
    assert all(v > 0.75 for v in ev["auroc_large_direct"].values()), ev["auroc_large_direct"]
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
    from routedvlm.cli import main

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
    served = types.SimpleNamespace(stateful=False, returns_hidden_states=False, name="http://127.0.0.1:8101/v1#toy-large")
    remote = types.SimpleNamespace(small=types.SimpleNamespace(stateful=False), large=served,
                                   sides={"small": types.SimpleNamespace(stateful=False), "large": served})
    vlm = RoutedVLM(remote, router)
    assert vlm.router is None and "an OpenAI-compatible server (vLLM, SGLang) does not" in vlm.router_error


def test_one_shot_self_probe_is_refused():
    with pytest.raises(ConfigError, match=r"the self-probe reads the large_direct pass, which only `mode` 'cascade'"):
        TrainConfig(router="self-probe", mode="one-shot")
    with pytest.raises(ConfigError, match=r"`hidden_layers` must be comma-separated integers"):
        TrainConfig(router="self-probe", hidden_layers="last")


def test_the_large_model_error_says_what_is_wrong_and_how_to_fix_it(tmp_path):
    """Regression: a labels' large model recorded at a folder that does not exist here was blamed on an HTTP server."""
    from routedvlm.training.probe.self_probe import resolve_large

    config = TrainConfig(router="self-probe")
    missing = {"models": {"large": {"name": "/elsewhere/checkpoints/large", "weights_hash": "sha256:" + "ab" * 32}}}
    with pytest.raises(ConfigError, match=r"\(weights sha256:abababab.*, recorded at '/elsewhere/checkpoints/large', "
                                          r"which does not exist here\) was not found.*Pass --large FOLDER") as err:
        resolve_large(config, missing)
    assert "HTTP" not in str(err.value)
    served = {"models": {"large": {"name": "http://127.0.0.1:8101/v1#toy-large", "server": "http://127.0.0.1:8101/v1",
                                   "model_id": "toy-large", "device": "remote"}}}
    with pytest.raises(ConfigError, match=r"served over HTTP \(http://127.0.0.1:8101/v1, model 'toy-large'\).*"
                                          r"Pass --large FOLDER"):
        resolve_large(config, served)
    with pytest.raises(ConfigError, match=r"must be a local checkpoint folder; '/nope/large' \(from --large\) does not "
                                          r"exist"):
        resolve_large(TrainConfig(router="self-probe", large="/nope/large"), missing)
