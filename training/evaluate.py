"""Side-by-side evaluation on the test split: single strategies, the oracle, mutual verification at every K, every
rule of the family at its calibrated parameter, and the chosen policy, each with the target's verdict on test.

Rows (accuracy, mean and p90 realized latency, speed-up = mean latency of `large_reason` / the row's, mix):
- every single strategy, run standalone (`latency_ms__s`); `oracle`: per sample the cheapest correct candidate
  (standalone latency), else the cheapest candidate (counted wrong);
- `mutual verification K=k` for every candidate K: cascade paying large_direct + small_direct; accept
  large_direct when the two direct answers agree, else transfer_k (members of the family's baselines chain);
- per parameterised rule (tau-rule, lagrangian, binary large_direct/large_reason): its least-latency certified
  parameter on the calibration rows (training/calibration/certify.py); a rule with none certified has no row;
- on a ladder (labels of three or more models): `best pair a/b: <rule>` for every two-model sub-pair, the certified
  policy of a router trained on that pair's strategies only, at the same target and reference (training/sub_pairs.py);
  mutual verification runs between every two models whose transfer is a candidate and its row names them;
- `chosen: <rule>` (last): the member calibration picked among all of them (it is never slower on the calibration
  rows than any certified row above; this table shows whether that held out of sample).
Target on test: regret target: required = accuracy(reference) on test - alpha; `min_accuracy` a: required = a;
SE = sqrt(r (1 - r) / n_test) at r = required, the standard error of an accuracy measured on n_test rows.
Curves: each parameterised rule swept over its whole grid on the test rows. Area (`auc`): the best accuracy
reachable within a mean latency L, averaged over L from the fastest to the slowest single strategy's mean latency
(0 below a curve's cheapest point): 1.0 = every sample right at any latency; higher is better.
Utility (the champion alias): accuracy targets -> speed-up when accuracy >= required (no standard-error slack), else
accuracy - required (< 0); latency target -> accuracy when mean latency <= budget, else -(excess / budget).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from routedvlm.router.strategies import LARGE_REASON

from .costs import is_ladder, label_strategies, realized_correct, realized_latency  # noqa: F401 (re-exports)
from .calibration.rule_family import Scorer, baseline_members

PARAM_CHAINS = ("tau", "lagrangian", "binary")


def summarize(name: str, kind: str, correct, latency, chosen, ref_ms: float | None, **extra) -> dict:
    latency = np.asarray(latency, dtype=float)
    mix = pd.Series(np.asarray(chosen, dtype=object)).value_counts(normalize=True)
    mean = float(latency.mean())
    return {"name": name, "kind": kind, "accuracy": float(np.mean(correct)), "mean_latency_ms": mean,
            "p90_latency_ms": float(np.quantile(latency, 0.9)),
            "speedup_vs_large_reason": (ref_ms / mean) if ref_ms and mean > 0 else None,
            "mix": {str(k): round(float(v), 4) for k, v in mix.items()}, **extra}


def oracle_row(test: pd.DataFrame, candidates: list[str], ref) -> dict:
    lat = np.stack([test[f"latency_ms__{s}"].to_numpy(float) for s in candidates], axis=1)
    ok = np.stack([test[f"correct__{s}"].to_numpy(bool) for s in candidates], axis=1)
    pick = np.where(ok.any(axis=1), np.argmin(np.where(ok, lat, np.inf), axis=1), np.argmin(lat, axis=1))
    rows = np.arange(len(test))
    return summarize("oracle", "oracle", ok[rows, pick], lat[rows, pick], np.asarray(candidates)[pick], ref)


def mutual_verification_rows(scorer: Scorer, ref, candidates=None) -> list[dict]:
    """Mutual verification at every (candidate) K of the labels (none when small_direct is not labelled)."""
    out, ladder = [], is_ladder(scorer.df)
    for m in baseline_members(scorer.df, candidates):
        if m.rule["name"] == "mutual-verification":
            correct, latency, chosen = scorer.score(m)
            name = m.name + (" small/large" if ladder and "/" not in m.name else "")  # a ladder's rows name the models
            out.append(summarize(name, "baseline", correct, latency, chosen, ref, rule=m.rule))
    return out


def mutual_verification_row(test: pd.DataFrame, k: int | None, ref) -> dict | None:
    """Mutual verification at K = `k` alone (the demo's table)."""
    rows = [r for r in mutual_verification_rows(Scorer(None, test), ref) if r["rule"]["keep_tokens"] == k]
    return rows[0] if rows else None


def required_accuracy(spec, test: pd.DataFrame) -> float | None:
    """The accuracy the certified claim promises on `test` (None for latency budgets)."""
    if spec.relative:
        return float(test[f"correct__{spec.reference}"].mean()) - spec.alpha
    return 1.0 - spec.alpha if spec.kind == "error" else None


def verdict(row: dict, target: dict, required: float | None, se: float | None) -> str:
    """'met (+0.012, SE 0.011)' or 'missed by 0.012 (SE 0.011)'; latency budgets compare the mean latency."""
    if target["kind"] == "latency_ms":
        gap = row["mean_latency_ms"] - target["value"]
        return f"met ({-gap:.0f} ms to spare)" if gap <= 0 else f"missed by {gap:.0f} ms"
    gap = row["accuracy"] - required
    return f"met (+{gap:.3f}, SE {se:.3f})" if gap >= -1e-12 else f"missed by {-gap:.3f} (SE {se:.3f})"


def _met(row: dict, target: dict, required) -> bool:
    if target["kind"] == "latency_ms":
        return row["mean_latency_ms"] <= target["value"]
    return row["accuracy"] >= required - 1e-12


def evaluate(router, calib: pd.DataFrame, test: pd.DataFrame, target: dict, calibration, *,
             proba_test: pd.DataFrame | None = None, model_cost_ms=0.0, train: pd.DataFrame | None = None,
             pair_rows=None) -> dict:
    """The evaluation dict (rows, curves, areas, target verdicts, utility) of a calibrated router on `test`;
    `calibration` is certify()'s result; `model_cost_ms` is charged to every row that reads the model; `train`: the
    training rows (the base rate of the probability report, training/probability.py); `pair_rows`: a ladder's
    sub-pair rows (sub_pairs.py), placed before the chosen row and compared with it (`ladder_vs_pairs`)."""
    policy = router.policy
    present = label_strategies(test)
    ref = float(test[f"latency_ms__{LARGE_REASON}"].mean()) if LARGE_REASON in present else None
    scorer = Scorer(router, test, proba_test, model_cost_ms)
    rows = [summarize(s, "single", test[f"correct__{s}"], test[f"latency_ms__{s}"], [s] * len(test), ref)
            for s in present]
    rows.append(oracle_row(test, list(policy.strategies), ref))
    rows += mutual_verification_rows(scorer, ref, policy.strategies)
    for chain in PARAM_CHAINS:
        best = calibration.best(chain)
        if best is not None:
            correct, latency, chosen = scorer.score(best.member)
            rows.append(summarize(best.member.name, "rule", correct, latency, chosen, ref, rule=best.member.rule,
                                  calibration=best.to_dict()))
    rows += list(pair_rows or [])
    chosen_m = calibration.chosen.member
    correct, latency, chosen = scorer.score(chosen_m)
    rows.append(summarize(f"chosen: {chosen_m.name}", "learned", correct, latency, chosen, ref, rule=chosen_m.rule,
                          calibration=calibration.chosen.to_dict()))
    required = required_accuracy(calibration.spec, test)
    se = float(np.sqrt(required * (1 - required) / len(test))) if required is not None and len(test) else None
    for r in rows:
        r["target_met"], r["verdict"] = _met(r, target, required), verdict(r, target, required, se)
    curves = sweep_chains(calibration, scorer)
    singles = pd.DataFrame([r for r in rows if r["kind"] == "single"])
    lo, hi = float(singles["mean_latency_ms"].min()), float(singles["mean_latency_ms"].max())
    learned = rows[-1]
    from .probability import probability_report

    return {
        "probabilities": probability_report(scorer._proba(), scorer.df, train),
        "target": target, "rule": policy.decision_rule, "mode": policy.mode, "paid_stages": list(policy.paid_stages),
        "strategies": list(policy.strategies), "calibration": calibration.to_dict(),
        "certificate": calibration.certificate(), "test_rows": len(test), "required_test": required,
        "target_met_test": bool(learned["target_met"]), "standard_error_test": se,
        "utility": utility(learned, target, required, len(test)), "rows": rows,
        "curves": {k: v.to_dict(orient="records") for k, v in curves.items()},
        "auc": {k: area_under_curve(v, lo, hi) for k, v in curves.items()},
        "auc_single_strategies": area_under_curve(singles, lo, hi), "auc_range_ms": [lo, hi],
        **({"ladder_vs_pairs": ladder_vs_pairs(rows)} if pair_rows else {}),
    }


def sweep_chains(calibration, scorer: Scorer) -> dict[str, pd.DataFrame]:
    """(param, accuracy, mean_latency_ms) of every member of the tau, lagrangian and binary chains on the rows."""
    out = {}
    for chain in PARAM_CHAINS:
        pts = []
        for m in [s.member for s in calibration.chains.get(chain, [])]:
            correct, latency, _ = scorer.score(m)
            pts.append((m.rule["param"], float(correct.mean()), float(latency.mean())))
        if pts:
            out[chain] = pd.DataFrame(pts, columns=["param", "accuracy", "mean_latency_ms"])
    return out


def area_under_curve(points: pd.DataFrame, lo: float, hi: float) -> float:
    """Normalised area of the best-accuracy-within-latency step function over [lo, hi] (module docstring)."""
    if not hi > lo:
        return float("nan")
    pts = points.sort_values("mean_latency_ms")
    xs = pts["mean_latency_ms"].to_numpy(float)
    best = np.maximum.accumulate(pts["accuracy"].to_numpy(float))
    edges = np.clip(np.concatenate([xs, [hi]]), lo, hi)
    return float(np.sum(best * np.diff(edges)) / (hi - lo))


def utility(row: dict, target: dict, required: float | None, n_test: int | None = None) -> float:
    """The champion comparison score of an evaluated row (module docstring)."""
    if target["kind"] != "latency_ms":  # no slack: a router that misses its test target never wins (issue 27)
        if row["accuracy"] >= required - 1e-12:
            return float(row["speedup_vs_large_reason"] or 0.0)
        return row["accuracy"] - required
    budget = target["value"]
    lat = row["mean_latency_ms"]
    return float(row["accuracy"]) if lat <= budget else -(lat - budget) / budget


def ladder_vs_pairs(rows: list[dict]) -> dict | None:
    """The ladder policy (the last row; sub_pairs.py makes the pair rows) against the fastest sub-pair whose certification was feasible: both mean
    latencies and the ladder's reduction (1 - ladder / pair); None without a feasible pair."""
    pairs = [r for r in rows if r["kind"] == "pair" and r["feasible"]]
    if not pairs:
        return None if not any(r["kind"] == "pair" for r in rows) else {"best_pair": None}
    best, ladder = min(pairs, key=lambda r: r["mean_latency_ms"]), rows[-1]
    return {"best_pair": best["pair"], "best_pair_mean_latency_ms": best["mean_latency_ms"],
            "best_pair_accuracy": best["accuracy"], "ladder_mean_latency_ms": ladder["mean_latency_ms"],
            "ladder_accuracy": ladder["accuracy"],
            "latency_reduction": 1.0 - ladder["mean_latency_ms"] / best["mean_latency_ms"]}
