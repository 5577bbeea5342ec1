"""The registry step of train-router: recover what interrupted runs left, register atomically, promote by the rule.

On a sqlite store all of it runs under `store_lock` (routedvlm.router.tracking), which each train-router holds from
its run's start to its end; so a run still RUNNING with the `routedvlm.store_lock` tag, seen by a holder of the
lock, belongs to a process that died: it is marked FAILED. A version is created together with its tags (one
transaction), so a kill cannot leave a version without them; versions that still lack routedvlm's tags (made by
hand, or by an older routedvlm that was interrupted) are tagged `routedvlm.incomplete`. A version whose champion
comparison was interrupted (no `routedvlm.champion_decision` tag) gets that tag saying so, and is not promoted.
"""
from __future__ import annotations

import logging

from routedvlm.router.tracking import CHAMPION_ALIAS as CHAMPION

log = logging.getLogger(__name__)
LOCK_TAG = "routedvlm.store_lock"  # on runs logged while holding the store lock
HASH_TAG, UTILITY_TAG, INCOMPLETE_TAG = "routedvlm.labels_hash", "routedvlm.test_utility", "routedvlm.incomplete"
DECISION_TAG = "routedvlm.champion_decision"  # set once the champion rule has been applied to the version


def recover_interrupted(client, experiment_id: str, name: str | None) -> list[str]:
    """Mark dead train-router runs FAILED and tag incomplete versions of `name`; one message per repair.
    Call only while holding the store lock of a sqlite store."""
    notes = []
    stuck = client.search_runs([experiment_id], filter_string=f"attributes.status = 'RUNNING' and tags.`{LOCK_TAG}` = 'held'",
                               max_results=1000)
    for run in stuck:
        client.set_terminated(run.info.run_id, status="FAILED")
        notes.append(f"run {run.info.run_id} was left RUNNING by a train-router that was killed: marked FAILED")
    for mv in client.search_model_versions(f"name = '{_quote(name)}'") if name else []:
        tags = mv.tags or {}
        if HASH_TAG not in tags and INCOMPLETE_TAG not in tags:
            client.set_model_version_tag(name, mv.version, INCOMPLETE_TAG,
                                         "no routedvlm tags: an interrupted or external registration")
            notes.append(f"{name} version {mv.version} has no routedvlm tags (an interrupted or external "
                         f"registration): tagged {INCOMPLETE_TAG}")
        elif HASH_TAG in tags and DECISION_TAG not in tags:
            champion = CHAMPION in (mv.aliases or [])
            what = ("champion; the record of the decision was interrupted" if champion else
                    "not compared with the champion: its train-router was interrupted (promote it with --promote)")
            client.set_model_version_tag(name, mv.version, DECISION_TAG, what)
            notes.append(f"{name} version {mv.version}: {what}")
    return notes


def _quote(name: str) -> str:
    return name.replace("'", "\\'")


def register(model_uri: str, name: str, labels_hash: str, utility: float) -> str:
    """A new version of `name` for `model_uri`, created with routedvlm's tags in the same transaction."""
    import mlflow

    mv = mlflow.register_model(model_uri, name, tags={HASH_TAG: labels_hash, UTILITY_TAG: f"{utility:.6g}"})
    return str(mv.version)


def promote(config, result, version: str, alias: str) -> dict:
    """Set `alias` on `version` when there is no champion, with --promote, or when its test utility beats the
    current champion's (champion.champion_utility); never for a router whose calibration could not certify its
    target. The registration summary."""
    from mlflow import MlflowClient

    from .champion import champion_utility

    client = MlflowClient()
    name, mine = config.register_as, result.evaluation["utility"]
    cert = result.evaluation.get("certificate") or {}
    if cert.get("feasible") is False:  # never champion, not even with --promote
        why = f"not certified: {cert['statement']}"
        client.set_model_version_tag(name, version, "routedvlm.certified", "false")
        client.set_model_version_tag(name, version, DECISION_TAG, "not champion: " + why)
        return {"registered_as": name, "version": version, "champion": False, "champion_reason": why}
    theirs, how = champion_utility(name, result)
    won = config.promote or theirs is None or mine > theirs
    if won:
        why = "--promote" if config.promote else (how if theirs is None else f"utility {mine:.4g} > {theirs:.4g} ({how})")
        client.set_registered_model_alias(name, alias, version)
    else:
        why = f"utility {mine:.4g} <= champion's {theirs:.4g} ({how})"
    client.set_model_version_tag(name, version, DECISION_TAG, ("champion: " if won else "not champion: ") + why)
    return {"registered_as": name, "version": version, "champion": won, "champion_reason": why}
