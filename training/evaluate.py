"""Side-by-side evaluation on the test split: single strategies, oracle, fixed rules and the learned policy.

Rows (accuracy, mean and p90 realized latency, speed-up = mean latency of `large_reason` / the row's, mix):
- every single strategy, run standalone (`latency_ms__s`);
- `oracle`: per sample the cheapest correct candidate (standalone latency); when none is correct, the
  cheapest candidate (counted wrong);
- `mutual-verification (K)`: cascade paying large_direct + small_direct; accept large_direct when the two
  direct answers agree (`feat__large_direct+small_direct__agree`), else transfer_K (the baseline K);
- `binary large_direct/large_reason`: the learned P(large_direct correct) with a threshold calibrated on the
  calibration split to the same target (RouteLLM-style weak/strong routing, same mode and paid stages);
- `always transfer_K`: transfer_K standalone;
- `small-entropy threshold`: pay small_direct; accept it when `feat__small_direct__first_token_entropy` <=
  theta, else run large_reason (theta calibrated to the same target);
- `learned (tau=...)`: the trained policy at its calibrated tau.
Curve: the learned policy's (mean latency, accuracy) at every tau of `calibrate.tau_grid`. Its area `auc`:
with acc(L) = the best curve accuracy at mean latency <= L (0 below the cheapest point), auc =
1/(Lmax-Lmin) * integral of acc(L) over [Lmin, Lmax], Lmin/Lmax = min/max single-strategy mean latency on
test; in [0, 1], higher is better. `auc_single_strategies` is the same area for the single-strategy points.
Utility (used for the champion alias): accuracy target -> speed-up when the accuracy is at least the required
accuracy minus one standard error of a test-split accuracy (sqrt(r (1 - r) / n_test): a policy calibrated
exactly at the target lands below it half the time), else (accuracy - required) < 0; latency target ->
accuracy when mean latency <= budget, else -(excess / budget).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from routedvlm.router.strategies import LARGE_DIRECT, LARGE_REASON, SMALL_DIRECT, parse_strategy, transfer_id

from .calibrate import best_single_accuracy, pick_operating_point, sweep_tau
from .costs import Outcomes, realized_correct, realized_latency

ENTROPY_FEATURE = "feat__small_direct__first_token_entropy"
AGREE_FEATURE = "feat__large_direct+small_direct__agree"


def label_strategies(df: pd.DataFrame) -> list[str]:
    """Strategies present in the labels (a `correct__` and a `latency_ms__` column), in file order."""
    return [c[len("correct__"):] for c in df.columns
            if c.startswith("correct__") and f"latency_ms__{c[len('correct__'):]}" in df.columns]


def summarize(name: str, kind: str, correct, latency, chosen, ref_ms: float | None, **extra) -> dict:
    latency = np.asarray(latency, dtype=float)
    mix = pd.Series(np.asarray(chosen, dtype=object)).value_counts(normalize=True)
    mean = float(latency.mean())
    return {"name": name, "kind": kind, "accuracy": float(np.mean(correct)), "mean_latency_ms": mean,
            "p90_latency_ms": float(np.quantile(latency, 0.9)),
            "speedup_vs_large_reason": (ref_ms / mean) if ref_ms and mean > 0 else None,
            "mix": {str(k): round(float(v), 4) for k, v in mix.items()}, **extra}


def _single(test: pd.DataFrame, s: str, ref, name=None, kind="single") -> dict:
    return summarize(name or s, kind, test[f"correct__{s}"], test[f"latency_ms__{s}"], [s] * len(test), ref)


def oracle_row(test: pd.DataFrame, candidates: list[str], ref) -> dict:
    lat = np.stack([test[f"latency_ms__{s}"].to_numpy(float) for s in candidates], axis=1)
    ok = np.stack([test[f"correct__{s}"].to_numpy(bool) for s in candidates], axis=1)
    pick = np.where(ok.any(axis=1), np.argmin(np.where(ok, lat, np.inf), axis=1), np.argmin(lat, axis=1))
    rows = np.arange(len(test))
    return summarize("oracle", "oracle", ok[rows, pick], lat[rows, pick], np.asarray(candidates)[pick], ref)


def nearest_k(strategies: list[str], k: int) -> int | None:
    ks = [parse_strategy(s).keep_tokens for s in strategies if parse_strategy(s).is_transfer]
    ks = [x for x in ks if x is not None]
    return min(ks, key=lambda x: (abs(x - k), x)) if ks else None


def mutual_verification_row(test: pd.DataFrame, k: int, ref) -> dict | None:
    t = transfer_id(k)
    if AGREE_FEATURE in test.columns:
        agree = test[AGREE_FEATURE].to_numpy(float) >= 0.5
    else:
        norm = lambda c: test[c].astype(str).str.strip().str.lower().to_numpy()  # noqa: E731
        agree = norm(f"answer__{LARGE_DIRECT}") == norm(f"answer__{SMALL_DIRECT}")
    chosen = np.where(agree, LARGE_DIRECT, t).astype(object)
    lat = realized_latency(test, chosen, "cascade", [LARGE_DIRECT, SMALL_DIRECT])
    return summarize(f"mutual-verification (K={k})", "baseline", realized_correct(test, chosen), lat, chosen, ref)


def _binary_chosen(p_ld: np.ndarray, threshold: float) -> np.ndarray:
    return np.where(p_ld >= threshold, LARGE_DIRECT, LARGE_REASON).astype(object)


def binary_router_row(calib, test, p_ld_cal, p_ld_test, mode, paid, target, ref_acc_cal, ref, margin=0.0) -> dict:
    def points(df, p):
        outcomes, out = Outcomes(df, [LARGE_DIRECT, LARGE_REASON], mode, paid), []
        for th in np.unique(np.concatenate([np.linspace(0, 1, 101), np.quantile(p, np.linspace(0, 1, 101)), [1.01]])):
            ok, lat = outcomes.of(_binary_chosen(p, th))
            out.append((th, ok.mean(), lat.mean()))
        return pd.DataFrame(out, columns=["param", "accuracy", "mean_latency_ms"])

    op = pick_operating_point(points(calib, p_ld_cal), target, ref_acc_cal, margin, len(calib))
    chosen = _binary_chosen(p_ld_test, op.param)
    return summarize("binary large_direct/large_reason", "baseline", realized_correct(test, chosen),
                     realized_latency(test, chosen, mode, paid), chosen, ref, param=op.param)


def _entropy_eval(df, theta):
    accept = df[ENTROPY_FEATURE].to_numpy(float) <= theta
    chosen = np.where(accept, SMALL_DIRECT, LARGE_REASON).astype(object)
    lat = df[f"latency_ms__{SMALL_DIRECT}"].to_numpy(float) + np.where(
        accept, 0.0, df[f"latency_ms__{LARGE_REASON}"].to_numpy(float))
    return chosen, realized_correct(df, chosen), lat


def entropy_row(calib, test, target, ref_acc_cal, ref, margin=0.0) -> dict:
    values = calib[ENTROPY_FEATURE].to_numpy(float)
    thetas = np.unique(np.concatenate([np.quantile(values, np.linspace(0, 1, 101)), [-np.inf]]))
    pts = []
    for th in thetas:
        _, ok, lat = _entropy_eval(calib, th)
        pts.append((th, ok.mean(), lat.mean()))
    op = pick_operating_point(pd.DataFrame(pts, columns=["param", "accuracy", "mean_latency_ms"]), target, ref_acc_cal,
                              margin, len(calib))
    chosen, ok, lat = _entropy_eval(test, op.param)
    return summarize("small-entropy threshold", "baseline", ok, lat, chosen, ref,
                     param=op.param if np.isfinite(op.param) else None)


def area_under_curve(points: pd.DataFrame, lo: float, hi: float) -> float:
    """Normalised area of the best-accuracy-within-latency step function over [lo, hi] (module docstring)."""
    if not hi > lo:
        return float("nan")
    pts = points.sort_values("mean_latency_ms")
    xs = pts["mean_latency_ms"].to_numpy(float)
    best = np.maximum.accumulate(pts["accuracy"].to_numpy(float))
    edges = np.clip(np.concatenate([xs, [hi]]), lo, hi)
    return float(np.sum(best * np.diff(edges)) / (hi - lo))


def utility(row: dict, target: dict, reference_accuracy: float, n_test: int | None = None) -> float:
    """The champion comparison score of an evaluated row (module docstring)."""
    if target["kind"] == "accuracy":
        required = target["value"] * reference_accuracy
        slack = float(np.sqrt(required * (1 - required) / n_test)) if n_test else 0.0
        if row["accuracy"] >= required - slack:
            return float(row["speedup_vs_large_reason"] or 0.0)
        return row["accuracy"] - required
    budget = target["value"]
    lat = row["mean_latency_ms"]
    return float(row["accuracy"]) if lat <= budget else -(lat - budget) / budget


def evaluate(router, calib: pd.DataFrame, test: pd.DataFrame, target: dict, baseline_k: int,
             calibration=None) -> dict:
    """The evaluation dict (rows, curve, auc, target, utility) of a trained LightGBM policy on `test`."""
    policy = router.policy
    mode, paid, cands = policy.mode, list(policy.paid_stages), list(policy.strategies)
    present = label_strategies(test)
    ref = float(test[f"latency_ms__{LARGE_REASON}"].mean()) if LARGE_REASON in present else None
    p_cal, p_test = router.predict_proba(calib), router.predict_proba(test)
    rows = [_single(test, s, ref) for s in present]
    rows.append(oracle_row(test, cands, ref))
    k = nearest_k(present, baseline_k)
    if k is not None and {LARGE_DIRECT, SMALL_DIRECT} <= set(present):
        rows.append(mutual_verification_row(test, k, ref))
    ref_cal = best_single_accuracy(calib, cands)
    margin = getattr(calibration, "margin", 0.0)  # the calibrated baselines get the learned policy's margin
    if LARGE_DIRECT in cands and LARGE_REASON in present:
        rows.append(binary_router_row(calib, test, p_cal[LARGE_DIRECT].to_numpy(), p_test[LARGE_DIRECT].to_numpy(),
                                      mode, paid, target, ref_cal, ref, margin))
    if k is not None:
        rows.append(_single(test, transfer_id(k), ref, name=f"always transfer_{k}", kind="baseline"))
    if ENTROPY_FEATURE in test.columns and {SMALL_DIRECT, LARGE_REASON} <= set(present):
        rows.append(entropy_row(calib, test, target, ref_cal, ref, margin))
    chosen = router.decide_with_tau(test, policy.tau)
    learned = summarize(f"learned (tau={policy.tau:.3f})", "learned", realized_correct(test, chosen),
                        realized_latency(test, chosen, mode, paid), chosen, ref, param=policy.tau)
    rows.append(learned)
    curve = sweep_tau(p_test, policy.expected_cost_ms, policy.fallback, test, mode, paid)
    singles = pd.DataFrame([r for r in rows if r["kind"] == "single"])
    lo, hi = float(singles["mean_latency_ms"].min()), float(singles["mean_latency_ms"].max())
    ref_test = best_single_accuracy(test, cands)
    required = target["value"] * ref_test if target["kind"] == "accuracy" else target["value"]
    met = learned["accuracy"] >= required if target["kind"] == "accuracy" else learned["mean_latency_ms"] <= required
    return {
        "target": target, "tau": policy.tau, "mode": mode, "paid_stages": paid, "strategies": cands,
        "calibration": calibration.to_dict() if calibration is not None else None,
        "test_rows": len(test), "reference_accuracy_test": ref_test, "required_test": required,
        "target_met_test": bool(met), "standard_error_test": _se(required, len(test), target), "utility": utility(learned, target, ref_test, len(test)),
        "rows": rows, "curve": curve.rename(columns={"param": "tau"}).to_dict(orient="records"),
        "auc": area_under_curve(curve, lo, hi), "auc_single_strategies": area_under_curve(singles, lo, hi),
        "auc_range_ms": [lo, hi],
    }


def _se(required: float, n: int, target: dict) -> float | None:
    return float(np.sqrt(required * (1 - required) / n)) if target["kind"] == "accuracy" and n else None


def _fmt_mix(mix: dict, n: int = 3) -> str:
    items = sorted(mix.items(), key=lambda kv: -kv[1])
    text = " ".join(f"{k}:{v:.0%}" for k, v in items[:n])
    return text + (" ..." if len(items) > n else "")


def format_table(evaluation: dict) -> str:
    """The evaluation as a fixed-width terminal table plus the target and AUC lines."""
    head = f"{'policy':<36} {'acc':>6} {'mean ms':>9} {'p90 ms':>9} {'speed-up':>8}  mix"
    lines = [head, "-" * len(head)]
    for r in evaluation["rows"]:
        sp = r["speedup_vs_large_reason"]
        lines.append(f"{r['name'][:36]:<36} {r['accuracy']:>6.3f} {r['mean_latency_ms']:>9.1f} "
                     f"{r['p90_latency_ms']:>9.1f} {(f'{sp:.2f}x' if sp else '-'):>8}  {_fmt_mix(r['mix'])}")
    t = evaluation["target"]
    goal = (f"accuracy >= {t['value']} x best single ({evaluation['required_test']:.3f})" if t["kind"] == "accuracy"
            else f"mean latency <= {t['value']:.0f} ms")
    verdict = "met" if evaluation["target_met_test"] else "NOT met"
    se, learned = evaluation.get("standard_error_test"), evaluation["rows"][-1]
    if not evaluation["target_met_test"] and se and learned["accuracy"] >= evaluation["required_test"] - se:
        verdict = f"missed by {evaluation['required_test'] - learned['accuracy']:.3f}, within one standard error ({se:.3f})"
    lines.append(f"target on test: {goal} -> {verdict}; "
                 f"AUC learned {evaluation['auc']:.3f} vs single strategies {evaluation['auc_single_strategies']:.3f} "
                 f"(latency {evaluation['auc_range_ms'][0]:.0f}-{evaluation['auc_range_ms'][1]:.0f} ms)")
    return "\n".join(lines)
