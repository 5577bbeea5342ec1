"""MLflow for train-router: one run per training (params, metrics incl. the certificate, evaluation, plot, labels
as a dataset input, the router as a pyfunc model), registration under a name, and the `champion` alias.

Champion rule: a router whose calibration was infeasible (it could not certify its accuracy target and fell back
to always the most accurate strategy) never takes `champion`, not even with `--promote`. Otherwise the new
version takes it when there is none, with `--promote`, or when its test utility (training/evaluate.py: speed-up at
a met accuracy target, or accuracy within a latency budget) beats the current champion's utility measured by
running the champion on the SAME test rows under the SAME target. If the champion cannot run on these labels
(other features), the champion's logged `test_utility` is used when it was trained on labels with the same
content hash; otherwise the alias is left alone.
"""
from __future__ import annotations

import json
import logging
import math
import os
import warnings

log = logging.getLogger(__name__)


PATH_PARAMS = ("data", "output_dir", "dataset", "base", "large", "tracking_uri")


def _flat_params(config, result) -> dict:
    """MLflow params of a training run; local paths as `portable_path` records them (no writer's machine path)."""
    from routedvlm.router.checkpoints import portable_path

    params = {f"train.{k}": (",".join(map(str, v)) if isinstance(v, list) else
                             portable_path(v) if k in PATH_PARAMS and isinstance(v, str) else v)
              for k, v in config.to_dict().items()}
    params["labels.content_hash"] = result.labels_hash
    params["train.mode_choice"] = str(getattr(config, "mode_choice", "") or "")[:500]
    params["train.calib_choice"] = str(getattr(config, "calib_choice", "") or "")[:500]
    for key, value in sorted(result.metadata.items()):
        if key == "source_path" and result.metadata.get("embedded"):
            value = "routedvlm/data/toyworld/labels.parquet"  # the installed package's file, wherever that is
        if key != "content_hash":
            text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
            params[f"labels.{key}"] = text[:500]
    policy = result.router.policy
    cert = policy.certificate or {}
    params.update({"policy.rule": json.dumps(policy.decision_rule, sort_keys=True), "policy.tau": policy.tau,
                   "certificate.method": cert.get("method", ""), "certificate.loss": cert.get("loss", ""),
                   "certificate.statement": str(cert.get("statement", ""))[:500],
                   "certificate.calibration_hash": cert.get("calibration_hash", ""),
                   "certificate.outcome": cert.get("outcome", ""), "certificate.loss_kind": cert.get("loss_kind", ""),
                   "policy.fallback": policy.fallback, "policy.mode": policy.mode,
                   "policy.paid_stages": ",".join(policy.paid_stages), "policy.n_features": len(policy.features),
                   "policy.strategies": ",".join(policy.strategies)})
    return {k: ("" if v is None else v) for k, v in params.items()}


def _metrics(ev: dict) -> dict:
    cert = ev["certificate"]
    out = {"test_utility": ev["utility"], "test_target_met": float(ev["target_met_test"]),
           "auc_single_strategies": ev["auc_single_strategies"], **{f"auc_{k}": v for k, v in ev["auc"].items()},
           **{f"certificate_{k}": float(cert[k]) for k in ("delta", "delta_each", "delta_after_selection",
                                                            "routers_compared", "n", "bound", "risk_observed",
                                                            "p_value", "rows_needed", "feasible", "trivial")
                                                            if cert.get(k) is not None}}
    for s, r in (ev.get("probabilities") or {}).items():
        out[f"brier.{s}"] = r["brier"]
        if r.get("auroc") is not None:
            out[f"auroc.{s}"] = r["auroc"]
    for row in ev["rows"]:
        key = ("learned" if row["kind"] == "learned" else "pair_" + "_".join(row["pair"]) if row["kind"] == "pair"
               else "".join(c if c.isalnum() else "_" for c in row["name"]).strip("_"))
        for m in ("accuracy", "mean_latency_ms", "p90_latency_ms", "speedup_vs_large_reason"):
            if row[m] is not None:
                out[f"{key}.{m}"] = row[m]
    vs = ev.get("ladder_vs_pairs") or {}
    if vs.get("best_pair"):  # a ladder: the ladder policy against its fastest certified sub-pair (sub_pairs.py)
        out["ladder_latency_reduction_vs_best_pair"] = vs["latency_reduction"]
    return {k: float(v) for k, v in out.items() if v is not None and math.isfinite(float(v))}


def nonfinite_metrics(ev: dict) -> dict:
    """The learned policy's test metrics that the champion rule reads and that are not finite numbers."""
    import math

    learned = ev["rows"][-1]
    values = {"test_utility": ev["utility"], **{f"learned.{m}": learned.get(m) for m in
                                                ("accuracy", "mean_latency_ms", "p90_latency_ms", "speedup_vs_large_reason")}}
    return {k: v for k, v in values.items() if not (v is None and k.endswith("speedup_vs_large_reason"))
            and not (isinstance(v, (int, float)) and math.isfinite(v))}


def track(config, result, labels_df) -> dict:
    """Log the run, register the router (unless --no-register) and update the champion alias. A router whose test
    metrics are not finite is neither logged nor registered (TrainingError)."""
    from routedvlm.errors import TrainingError

    bad = nonfinite_metrics(result.evaluation)
    if bad:
        raise TrainingError(f"The router's test metrics are not finite ({bad}); it is not logged or registered (the "
                            f"folder is {result.output_dir / 'router'}). Check the labels' latencies "
                            "(routedvlm labels validate) and retrain.")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    from mlflow import MlflowClient

    from routedvlm.router.tracking import CHAMPION_ALIAS, get_or_create_experiment, setup_mlflow, sqlite_path, store_lock

    from .registry import promote, recover_interrupted, register, spend_ledger

    uri = setup_mlflow(config.tracking_uri)
    name = None if config.no_register else config.register_as
    with store_lock(uri):  # a sqlite store: one train-router at a time logs, registers and promotes
        exp_id = get_or_create_experiment(config.experiment, uri)
        out = {"tracking_uri": uri, "experiment_id": exp_id, "recovered": []}
        if sqlite_path(uri) is not None:
            out["recovered"] = recover_interrupted(MlflowClient(), exp_id, name)
        for note in out["recovered"]:
            log.warning("%s", note)
        ledger = spend_ledger(MlflowClient(), name, result) if name else None  # restates the certificate first
        _log_run(config, result, labels_df, exp_id, out, locked=sqlite_path(uri) is not None)
        if name:  # after the run ended: a version always points at a finished run
            version = register(out["model_uri"], name, result.labels_hash, result.evaluation["utility"], ledger)
            out.update(promote(config, result, version, CHAMPION_ALIAS, ledger))
    return out


def _log_run(config, result, labels_df, exp_id: str, out: dict, *, locked: bool) -> None:
    import mlflow

    from routedvlm.router.mlflow_model import log_router_model

    from .registry import LOCK_TAG

    tags = {"routedvlm.labels_hash": result.labels_hash, "routedvlm.router_type": result.router.policy.router_type,
            "routedvlm.target": json.dumps(result.evaluation["target"]), **({LOCK_TAG: "held"} if locked else {})}
    with mlflow.start_run(experiment_id=exp_id, tags=tags) as run:  # created with its tags: a kill finds them
        out["run_id"] = run.info.run_id
        mlflow.log_params(_flat_params(config, result))
        mlflow.log_metrics(_metrics(result.evaluation))
        mlflow.log_artifact(str(result.output_dir / "evaluation.json"))
        mlflow.log_artifact(str(result.output_dir / "curve.png"))
        if (result.output_dir / "reliability.png").is_file():
            mlflow.log_artifact(str(result.output_dir / "reliability.png"))
        mlflow.log_text(result.table, "evaluation.txt")
        mlflow.log_dict(result.metadata, "labels_metadata.json")
        with warnings.catch_warnings():  # source-kind ambiguity and integer-column hints are noise here
            warnings.simplefilter("ignore", UserWarning)
            dataset = mlflow.data.from_pandas(labels_df, source=result.metadata.get("source_path") or "in-memory",
                                              name="labels", digest=result.labels_hash[:16])
            mlflow.log_input(dataset, context="training")
        out["model_uri"] = log_router_model(result.output_dir / "router", name="router").model_uri
