"""The current champion's utility on this run's test rows: what `registry.promote` compares a new router against.

Its own module so that `tracking` (which logs and registers) and `registry` (which promotes) import it without
importing each other.
"""
from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def champion_utility(name: str, result) -> tuple[float | None, str, float]:
    """(utility of the current champion on the comparison rows, how it was obtained, this router's utility on the same
    rows); (None, why, ...) if there is no champion. The comparison rows are `comparison_rows`'."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    from routedvlm.errors import RoutedVLMError
    from routedvlm.router.load import load_router
    from routedvlm.router.tracking import CHAMPION_ALIAS

    client = MlflowClient()
    try:
        mv = client.get_model_version_by_alias(name, CHAMPION_ALIAS)
    except MlflowException:
        return None, "no champion yet", result.evaluation["utility"]
    ev = result.evaluation
    try:
        champ = load_router(f"models:/{name}@{CHAMPION_ALIAS}")
        rows, where = comparison_rows(champ, result)
        if rows is None:
            raise KeyError(where)
        theirs = _utility_on(champ, rows, ev, "champion")
        if len(rows) == len(result.test):
            return theirs, f"version {mv.version} re-evaluated on this test split: {where}", ev["utility"]
        mine = _utility_on(result.router, rows, ev, "challenger")
        return theirs, (f"version {mv.version} re-evaluated on {len(rows)} of this split's {len(result.test)} test "
                        f"rows, {where}"), mine
    except (RoutedVLMError, KeyError) as exc:
        log.warning("cannot run the champion (version %s) on these labels: %s", mv.version, exc)
    run = client.get_run(mv.run_id) if mv.run_id else None
    if run and run.data.tags.get("routedvlm.labels_hash") == result.labels_hash and "test_utility" in run.data.metrics:
        return (run.data.metrics["test_utility"], f"version {mv.version} logged utility on the same labels",
                ev["utility"])
    return float("inf"), f"version {mv.version} is not comparable on these labels (use --promote)", ev["utility"]


def comparison_rows(champ, result):
    """(rows to compare on, how they were chosen), or (None, why not): this run's test rows (never trained or
    calibrated on by the challenger), less those the champion was trained or calibrated on when it was trained on
    these labels (its split is recomputed from its recorded seed and sizes), with the sample columns its type reads
    beyond the features (a LoRA probe's `image`: reloaded from the labels' sample source)."""
    from routedvlm.router.router_types import type_facts

    from .calibration.rule_family import with_agreement

    rows, where = with_agreement(result.test), "rows this router was neither trained nor calibrated on"
    if champ.policy.training_data_hash and champ.policy.training_data_hash == result.labels_hash:
        theirs = _champion_test_ids(champ, result)
        if theirs is None:
            return None, "the champion was trained on these labels but its split cannot be recomputed"
        rows = rows[rows["sample_id"].astype(str).isin(theirs)]
        where = "rows neither router was trained or calibrated on, the champion's split recomputed"
        if len(rows) == 0:
            return None, "every test row of this split trained or calibrated the champion"
    else:
        where += "; the champion was trained on other labels"
    needs = [c for c in type_facts(champ.policy.router_type).inputs if c not in rows.columns and c != "question"]
    if needs:
        from .probe.data import attach_samples

        rows = attach_samples(rows, result.metadata)
        where += f", with the samples' {needs} reloaded from the labels' sample source"
    return rows, where


def _champion_test_ids(champ, result) -> set | None:
    """The sample ids of the champion's own test rows on these labels (its train/calibration rows are the rest)."""
    from .labels_io import load_labels
    from .split import split_labels

    split = (champ.policy.params or {}).get("split") or {}
    sizes = {k: split.get(k) for k in ("train", "calibration", "test")}
    if None in sizes.values() or "seed" not in split or not result.metadata.get("source_path"):
        return None
    labels, _ = load_labels(result.metadata["source_path"])
    total = sum(sizes.values())
    if len(labels) != total:
        return None
    mine = split_labels(labels, sizes["calibration"] / total, sizes["test"] / total, int(split["seed"]))
    if mine.sizes() != sizes:
        return None
    return set(mine.test["sample_id"].astype(str))


def _utility_on(router, rows, ev: dict, name: str) -> float:
    """`router`'s utility (evaluate.utility) on `rows` at this run's target, the probe's own charged cost included."""
    from routedvlm.router.decision_rules import uses_model

    from .costs import realized_correct, realized_latency
    from .evaluate import summarize, utility

    p = router.policy
    chosen = router.choices(rows)
    latency = realized_latency(rows, chosen, p.mode, p.paid_stages)
    if uses_model(p.decision_rule):
        latency = latency + float((p.metrics or {}).get("probe_cost_ms_mean", 0.0))
    ref = float(rows["latency_ms__large_reason"].mean()) if "latency_ms__large_reason" in rows else None
    row = summarize(name, name, realized_correct(rows, chosen), latency, chosen, ref)
    return utility(row, ev["target"], _required_on(rows, ev), len(rows))


def _required_on(rows, ev: dict) -> float | None:
    """The accuracy this run's certified claim promises on `rows` (its reference's accuracy there, less alpha)."""
    cert, required = ev.get("certificate") or {}, ev.get("required_test")
    reference = cert.get("reference")
    if required is None or not reference or f"correct__{reference}" not in rows:
        return required
    return float(rows[f"correct__{reference}"].mean()) - float(cert["risk_limit"])


def _ref_latency(ev: dict) -> float | None:
    rows = [r for r in ev["rows"] if r["kind"] == "single" and r["name"] == "large_reason"]
    return rows[0]["mean_latency_ms"] if rows else None
