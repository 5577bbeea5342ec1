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
# the delta ledger (docs/DESIGN.md, "The level that holds"): per version, the calibration rows' hash, its own delta,
# whether it spent delta on those rows, and the level its champion statement holds at after the choice
CAL_HASH_TAG, DELTA_TAG, DIGEST_TAG = "routedvlm.calibration_hash", "routedvlm.delta_each", "routedvlm.router_digest"
LEDGER_TAG, AFTER_TAG = "routedvlm.ledger", "routedvlm.delta_after_selection"
LEDGER_LIMIT = 0.5  # a version that would take the delta spent on its calibration rows above this is not compared


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


def register(model_uri: str, name: str, labels_hash: str, utility: float, ledger: dict | None = None) -> str:
    """A new version of `name` for `model_uri`, created with routedvlm's tags (and its ledger entry, `spend_ledger`)
    in the same transaction."""
    import mlflow

    tags = {HASH_TAG: labels_hash, UTILITY_TAG: f"{utility:.6g}", **((ledger or {}).get("tags") or {})}
    mv = mlflow.register_model(model_uri, name, tags=tags)
    return str(mv.version)


def ledger_spent(client, name: str, calibration_hash: str, digest: str = "") -> tuple[float, int]:
    """(delta spent, routers) on the calibration rows with `calibration_hash` by the versions of `name` that were
    tested on them and may be compared for champion (every registered version but those refused by the limit).
    The same router registered again (same `digest`: models, rule and certificate) is the same event: counted once,
    and not at all when it is the router being registered now."""
    spent: dict[str, float] = {}
    for mv in client.search_model_versions(f"name = '{_quote(name)}'"):
        tags = mv.tags or {}
        if tags.get(CAL_HASH_TAG) == calibration_hash and tags.get(LEDGER_TAG) == "spent":
            key = tags.get(DIGEST_TAG) or f"version-{getattr(mv, 'version', id(mv))}"
            spent[key] = max(spent.get(key, 0.0), float(tags.get(DELTA_TAG) or 0.0))
    spent.pop(digest, None)
    return sum(spent.values()), len(spent)


def router_digest(policy) -> str:
    """What makes two registered routers the same certified event: model files, rule, mode, candidates, features
    and the certified numbers."""
    import hashlib
    import json

    cert = policy.certificate or {}
    doc = {"models": policy.model_sha256, "rule": policy.decision_rule, "mode": policy.mode,
           "strategies": policy.strategies, "features": policy.features,
           "cert": [cert.get(k) for k in ("calibration_hash", "chosen", "losses", "n", "risk_limit", "delta_each")]}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:32]


def spend_ledger(client, name: str, result) -> dict:
    """Enter the new version in the delta ledger of `name` before its run is logged: its certificate is restated at
    delta_each + the delta already spent on the same calibration rows (what holds for the champion after the
    choice among all of them, a union bound), or, when that would pass LEDGER_LIMIT, it is refused a comparison
    (never champion: the statement would be too weak; label fresh calibration rows). Returns the ledger entry."""
    from .calibration.selection import restate_result

    cert = result.router.policy.certificate or {}
    key, own = cert.get("calibration_hash") or "", cert.get("delta_each", cert.get("delta"))
    if not key or own is None:  # latency budgets: nothing certified, nothing spent
        return {"tags": {CAL_HASH_TAG: key, LEDGER_TAG: "nothing certified"}, "refused": False}
    digest = router_digest(result.router.policy)
    prior, count = ledger_spent(client, name, key, digest)
    total = prior + float(own)
    tags = {CAL_HASH_TAG: key, DELTA_TAG: f"{float(own):.6g}", DIGEST_TAG: digest}
    if total > LEDGER_LIMIT + 1e-12:
        why = (f"{count} earlier versions of {name} already spent delta {prior:.4g} on these calibration rows; "
               f"comparing this one would leave the champion's statement at probability >= {1 - total:.4g} (limit "
               f"{1 - LEDGER_LIMIT:.4g}). Train on labels with fresh calibration rows (more labels, or another "
               "--seed on new labels) or register under another --register-as")
        return {"tags": {**tags, LEDGER_TAG: "refused"}, "refused": True, "why": why}
    cert = restate_result(result, total, count + 1,
                          f"champion alias of {name}: chosen among the {count + 1} versions certified on these "
                          f"calibration rows (registry delta ledger), deltas summing to {total:.4g}")
    return {"tags": {**tags, LEDGER_TAG: "spent", AFTER_TAG: f"{cert['delta_after_selection']:.6g}"},
            "refused": False, "spent": cert["delta_after_selection"]}


def promote(config, result, version: str, alias: str, ledger: dict | None = None) -> dict:
    """Set `alias` on `version` when there is no champion, with --promote, or when its test utility beats the
    current champion's (champion.champion_utility); never for a router whose calibration could not certify its
    target, that missed its target on the test rows, or that the delta ledger refused. The registration summary."""
    from mlflow import MlflowClient

    from .champion import champion_utility

    client = MlflowClient()
    name = config.register_as
    cert = result.evaluation.get("certificate") or {}
    never = _never_champion(result, cert, ledger)
    if never:  # never champion, not even with --promote
        if cert.get("feasible") is False:
            client.set_model_version_tag(name, version, "routedvlm.certified", "false")
        client.set_model_version_tag(name, version, DECISION_TAG, "not champion: " + never)
        return {"registered_as": name, "version": version, "champion": False, "champion_reason": never}
    theirs, how, mine = champion_utility(name, result)
    won = config.promote or theirs is None or mine > theirs
    if won:
        why = "--promote" if config.promote else (how if theirs is None else f"utility {mine:.4g} > {theirs:.4g} ({how})")
        client.set_registered_model_alias(name, alias, version)
    else:
        why = f"utility {mine:.4g} <= champion's {theirs:.4g} ({how})"
        _restate_champion(client, name, alias, cert.get("calibration_hash"), (ledger or {}).get("spent"))
    client.set_model_version_tag(name, version, DECISION_TAG, ("champion: " if won else "not champion: ") + why)
    return {"registered_as": name, "version": version, "champion": won, "champion_reason": why}


def _never_champion(result, cert: dict, ledger: dict | None) -> str:
    """Why this version may never take the alias ('' when it may): not certified, refused by the delta ledger, or
    its test target missed (no standard-error slack)."""
    if cert.get("feasible") is False:
        return f"not certified: {cert['statement']}"
    if (ledger or {}).get("refused"):
        return f"not compared: {ledger['why']}"
    if not result.evaluation.get("target_met_test", True):
        return f"missed its target on the test rows ({result.evaluation['rows'][-1]['verdict']})"
    return ""


def _restate_champion(client, name: str, alias: str, key, spent) -> None:
    """The champion stays after a comparison on its own calibration rows: its registry tag records the level that
    now holds for it (its policy.json states the level at the time it was chosen)."""
    if not key or spent is None:
        return
    try:
        mv = client.get_model_version_by_alias(name, alias)
    except Exception:  # noqa: BLE001 (no champion: nothing to restate)
        return
    if (mv.tags or {}).get(CAL_HASH_TAG) == key:
        client.set_model_version_tag(name, mv.version, AFTER_TAG, f"{spent:.6g}")
