"""What a certificate promises after a choice among routers: each router is certified at its own delta; choosing one
of m routers whose certificates rest on the same calibration rows (the demo's champion, or train-router's champion
alias across runs: training/registry.py) leaves, by a union bound, probability >= 1 - (sum of their deltas) that the
chosen one's statement holds. The certificate's headline `delta` is always the level that holds (equal to
`delta_after_selection`); `delta_each` keeps the level of this router's own test; its `statement` quotes the former.
"""
from __future__ import annotations

import json

SELF_ONLY = "none: this router alone (no choice among routers certified on the same calibration rows)"


def claim_sentence(delta_after: float, compared: int, delta_each: float, claim: str) -> str:
    """The certified sentence at the level that holds after choosing among `compared` routers (each at `delta_each`)."""
    after = (f" (after choosing among {compared} routers certified on the same calibration rows, each at delta "
             f"{delta_each:.4g})" if compared > 1 or delta_after > delta_each + 1e-12 else "")
    return (f"with probability >= {1 - delta_after:.4g} over the calibration draw{after}, on new traffic from the same "
            f"distribution: {claim}")


def restate_after_selection(cert: dict, delta_after: float, compared: int, selection: str) -> dict:
    """`cert` (a certificate dict) restated at the level that holds after a choice among `compared` routers whose
    deltas sum to `delta_after` (a union bound over the routers compared: whichever is chosen, its statement holds
    with probability >= 1 - delta_after). The level only ever grows. Edits `cert` in place and returns it."""
    delta_after = max(float(delta_after), float(cert.get("delta_after_selection") or cert.get("delta") or 0.0))
    compared = max(int(compared), int(cert.get("routers_compared") or 1))
    cert.setdefault("delta_each", cert.get("delta"))  # certificates before delta_each: delta was the test's level
    cert.update(delta=delta_after, delta_after_selection=delta_after, routers_compared=compared, selection=selection)
    text = str(cert.get("statement", ""))
    if cert.get("feasible") and cert.get("delta") is not None and " distribution: " in text:
        claim = text.split(" distribution: ", 1)[1]
        cert["statement"] = claim_sentence(delta_after, compared, float(cert["delta_each"]), claim)
    return cert


def restate_result(result, delta_after: float, compared: int, selection: str) -> dict:
    """Restate a TrainResult's certificate everywhere it is written: the policy (and its saved policy.json), the
    evaluation (and evaluation.json). Returns the restated certificate."""
    cert = restate_after_selection(dict(result.router.policy.certificate or {}), delta_after, compared, selection)
    result.router.policy.certificate = cert
    result.evaluation["certificate"] = cert
    result.evaluation.setdefault("calibration", {})["certificate"] = cert
    if getattr(result, "table", None):
        from ..report import format_table

        result.table = format_table(result.evaluation)
    if result.router.policy.metrics:
        result.router.policy.metrics.update(certificate_delta=cert["delta"], certificate_delta_each=cert["delta_each"],
                                            certificate_delta_after_selection=cert["delta_after_selection"])
    out = getattr(result, "output_dir", None)
    if out is not None and (out / "router").is_dir():
        result.router.save(out / "router")
        (out / "evaluation.json").write_text(json.dumps(result.evaluation, indent=2, default=_jsonable) + "\n")
    return cert


def _jsonable(o):
    """json.dumps default for numpy scalars and arrays (as pipeline.jsonable; no import of the pipeline here)."""
    if hasattr(o, "tolist"):
        return o.tolist()
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")
