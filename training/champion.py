"""The current champion's utility on this run's test rows: what `registry.promote` compares a new router against.

Its own module so that `tracking` (which logs and registers) and `registry` (which promotes) import it without
importing each other.
"""
from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def champion_utility(name: str, result) -> tuple[float | None, str]:
    """(utility of the current champion on this run's test rows, how it was obtained); (None, why) if unknown."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    from routedvlm.errors import RoutedVLMError
    from routedvlm.router.load import load_router
    from routedvlm.router.tracking import CHAMPION_ALIAS

    from .costs import realized_correct, realized_latency
    from .evaluate import summarize, utility

    client = MlflowClient()
    try:
        mv = client.get_model_version_by_alias(name, CHAMPION_ALIAS)
    except MlflowException:
        return None, "no champion yet"
    ev, test = result.evaluation, result.test
    try:
        champ = load_router(f"models:/{name}@{CHAMPION_ALIAS}")
        from .calibration.rule_family import with_agreement

        rows = with_agreement(test)
        chosen = champ.choices(rows)
        p = champ.policy
        row = summarize("champion", "champion", realized_correct(rows, chosen),
                        realized_latency(rows, chosen, p.mode, p.paid_stages), chosen,
                        _ref_latency(ev))
        return (utility(row, ev["target"], ev["required_test"], len(test)),
                f"version {mv.version} re-evaluated on this test split")
    except (RoutedVLMError, KeyError) as exc:
        log.warning("cannot run the champion (version %s) on these labels: %s", mv.version, exc)
    run = client.get_run(mv.run_id) if mv.run_id else None
    if run and run.data.tags.get("routedvlm.labels_hash") == result.labels_hash and "test_utility" in run.data.metrics:
        return run.data.metrics["test_utility"], f"version {mv.version} logged utility on the same labels"
    return float("inf"), f"version {mv.version} is not comparable on these labels (use --promote)"


def _ref_latency(ev: dict) -> float | None:
    rows = [r for r in ev["rows"] if r["kind"] == "single" and r["name"] == "large_reason"]
    return rows[0]["mean_latency_ms"] if rows else None
