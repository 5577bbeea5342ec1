"""train-router end to end with MLflow: default ./mlruns sqlite store, run contents, registration, the
champion alias (a worse run does not take it, --promote does, an uncertified one never does), and loading by
`models:/vlm-router@champion`."""
import re

import pytest


@pytest.mark.slow
def test_train_register_champion_and_load(labels_path, tmp_path, monkeypatch, capsys):
    from mlflow import MlflowClient

    from routedvlm.router.load import load_router
    from routedvlm.cli import main
    from routedvlm.training.labels_io import load_labels

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    fast = ["--data", str(labels_path), "--num-boost-round", "40"]

    assert main(["train", *fast, "--output-dir", "r1"]) == 0
    out = capsys.readouterr().out
    assert "\nchosen: " in out and "mutual verification K=64" in out and "certificate: with probability" in out
    assert "registered vlm-router version 1 (champion: no champion yet)" in out
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    run = client.get_run(re.search(r"mlflow run (\w+)", out).group(1))
    assert run.data.params["labels.content_hash"] == run.data.tags["routedvlm.labels_hash"]
    machine = [k for k, v in run.data.params.items() if str(tmp_path) in v]  # paths are relative to the working folder
    assert not machine, f"MLflow params name this machine's paths: {machine}"
    assert "learned.accuracy" in run.data.metrics and "test_utility" in run.data.metrics
    assert run.data.metrics["certificate_delta"] == 0.1 and run.data.metrics["certificate_feasible"] == 1.0
    assert run.data.params["certificate.method"].startswith("learn-then-test") and "policy.rule" in run.data.params
    assert run.inputs.dataset_inputs[0].dataset.name == "labels"
    names = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"evaluation.json", "curve.png", "evaluation.txt"} <= names
    assert (tmp_path / "mlruns" / "artifacts").is_dir()

    labels, _ = load_labels(labels_path)
    rows = labels.head(100)
    champion = load_router("models:/vlm-router@champion", tracking_uri=uri)
    local = load_router(tmp_path / "r1" / "router")
    assert [d.strategy for d in champion.decide_batch(rows)] == [d.strategy for d in local.decide_batch(rows)]

    worse = [*fast, "--strategies", "large_direct,large_reason"]  # the binary rule: far slower at the target
    assert main(["train", *worse, "--output-dir", "r2"]) == 0
    out = capsys.readouterr().out
    assert "registered vlm-router version 2 (not champion: utility" in out
    assert "certificate after the choice among versions: with probability >= 0.8 over the calibration draw" in out
    assert str(client.get_model_version_by_alias("vlm-router", "champion").version) == "1"
    # the delta ledger (issue 27): version 2 was compared on version 1's calibration rows, so what holds for the
    # champion after that choice is 0.1 + 0.1; its policy.json, MLflow and the registry say so
    v2 = client.get_model_version("vlm-router", "2")
    assert v2.tags["routedvlm.ledger"] == "spent" and float(v2.tags["routedvlm.delta_each"]) == 0.1
    assert v2.tags["routedvlm.calibration_hash"] == client.get_model_version("vlm-router", "1").tags[
        "routedvlm.calibration_hash"]
    assert float(client.get_model_version("vlm-router", "1").tags["routedvlm.delta_after_selection"]) == 0.2
    cert2 = load_router(tmp_path / "r2" / "router").policy.certificate
    assert cert2["delta_after_selection"] == pytest.approx(0.2) and cert2["routers_compared"] == 2
    assert cert2["statement"].startswith("with probability >= 0.8 over the calibration draw (after choosing among 2")
    run2 = client.get_run(re.search(r"mlflow run (\w+)", out).group(1))
    assert run2.data.metrics["certificate_delta_after_selection"] == pytest.approx(0.2)

    assert main(["train", *worse, "--output-dir", "r3", "--promote"]) == 0
    assert "version 3 (champion: --promote)" in capsys.readouterr().out
    assert str(client.get_model_version_by_alias("vlm-router", "champion").version) == "3"
    assert load_router("models:/vlm-router@champion", tracking_uri=uri).policy.strategies == ["large_direct", "large_reason"]

    # a target the calibration rows cannot certify: registered, never champion, not even with --promote
    assert main(["train", *fast, "--target-accuracy", "0.999", "--output-dir", "r4", "--promote"]) == 0
    out = capsys.readouterr().out
    assert "certificate: infeasible with 300 calibration rows" in out
    assert "version 4 (not champion: not certified: infeasible with 300 calibration rows" in out
    assert str(client.get_model_version_by_alias("vlm-router", "champion").version) == "3"

@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the evaluation computes with the inf latencies
def test_a_router_with_non_finite_test_metrics_is_never_logged_or_registered(synthetic_df, tmp_path):
    import numpy as np

    from routedvlm.errors import TrainingError
    from routedvlm.training.config import TrainConfig
    from routedvlm.training.pipeline import train_router
    from routedvlm.training.split import split_labels
    from routedvlm.training.tracking import track

    df = synthetic_df.head(600).copy()  # a DataFrame is not validated like a file: an inf latency gets through
    test_ids = split_labels(df, 0.2, 0.2, 0).test["sample_id"]
    df.loc[df["sample_id"].isin(test_ids), "latency_ms__large_reason"] = np.inf  # only in the test split
    store = tmp_path / "store"
    config = TrainConfig(output_dir=str(tmp_path / "out"), num_boost_round=20, tracking_uri=f"sqlite:///{store}/mlflow.db")
    result = train_router(config, df, {"content_hash": "inf"})
    with pytest.raises(TrainingError, match=r"^The router's test metrics are not finite \(\{.*'learned\.mean_latency_ms': inf"):
        track(config, result, df)
    assert not store.exists()
