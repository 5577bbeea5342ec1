"""Evaluate a trained probe like the LightGBM router (same rows, curve, AUC), plus the probe's own cost and a
LightGBM router fitted on the same split, side by side in one table.

Probe cost per sample (added to every row that uses the probe's P(correct): the learned policy, the binary
baseline, the curve): the median measured time of its own pass (encode + prefill + head) over the test samples,
or, when the policy pays `small_direct` (RoutedVLM then shares that prefill), the median time of the shared pass.
"""
from __future__ import annotations

import time

import numpy as np
import pandas as pd

from routedvlm.router.base import Router
from routedvlm.router.strategies import SMALL_DIRECT


class PrecomputedRouter(Router):
    """A router whose P(correct) was computed beforehand, looked up by row index (for calibration and evaluation
    sweeps, so the probe runs once per sample)."""

    def __init__(self, policy, table: pd.DataFrame):
        self.table = table
        super().__init__(policy)

    def predict_proba(self, features):
        return self.table.loc[features.index, self.policy.strategies]


def predict_table(net, df: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """(P(correct) per row and strategy, the probe's own ms per row), one sample at a time as at run time."""
    rows, ms = [], []
    for r in df.to_dict(orient="records"):
        t0 = time.perf_counter()
        rows.append(net.p_correct(r)[0])
        ms.append((time.perf_counter() - t0) * 1000)
    values = np.stack(rows) if rows else np.zeros((0, len(net.strategies)))
    return pd.DataFrame(values, index=df.index, columns=net.strategies), np.asarray(ms)


def shared_cost_ms(net, df: pd.DataFrame, n: int = 8) -> tuple[float, float]:
    """(median ms of the shared pass, max |P shared - P own|) on up to `n` rows: the small model's direct-prompt cache
    is made by a base prefill (adapter off), as RoutedVLM's small_direct stage leaves it."""
    import contextlib

    import torch
    from transformers import DynamicCache

    from routedvlm.router.lora_probe import SharedPrefill

    ms, diff = [], 0.0
    for r in df.head(n).to_dict(orient="records"):
        inputs = net.encode(r["image"], r["question"])
        off = net.peft.disable_adapter() if net.peft is not None else contextlib.nullcontext()
        with torch.inference_mode(), off:
            cache = DynamicCache(config=net.vlm.model.config.get_text_config())
            net.vlm.model.model(**inputs, cache=cache, use_cache=True)
        rope = getattr(net.vlm.model.model, "rope_deltas", None)
        shared = SharedPrefill(cache, inputs["input_ids"].shape[1], None if rope is None else rope.clone())
        t0 = time.perf_counter()
        p_shared, used = net.p_correct(r, shared)
        ms.append((time.perf_counter() - t0) * 1000)
        diff = max(diff, float(np.abs(p_shared - net.p_correct(r)[0]).max()))
    return float(np.median(ms)) if ms else 0.0, diff


def probe_cost(policy, own_ms: np.ndarray, shared_ms: float) -> np.ndarray:
    """Per test row: the median of the measured own-pass times (robust to other jobs' bursts on a shared machine;
    the pass does the same work on every sample of a data set), or the shared pass's when small_direct is paid."""
    cost = shared_ms if SMALL_DIRECT in policy.paid_stages else float(np.median(own_ms)) if len(own_ms) else 0.0
    return np.full(len(own_ms), cost)


def add_probe_cost(ev: dict, router, test: pd.DataFrame, cost: np.ndarray, name: str = "lora-probe") -> dict:
    """The evaluation with the probe's cost in the learned row, the binary baseline, the curve, AUC and utility."""
    from .costs import realized_correct, realized_latency
    from .evaluate import area_under_curve, summarize, utility

    p = router.policy
    ref = next((r["mean_latency_ms"] for r in ev["rows"] if r["kind"] == "single" and r["name"] == "large_reason"), None)
    chosen = router.decide_with_tau(test, p.tau)
    lat = realized_latency(test, chosen, p.mode, p.paid_stages) + cost
    learned = summarize(f"{name} (tau={p.tau:.3f})", "learned", realized_correct(test, chosen), lat, chosen, ref,
                        param=p.tau, probe_ms_mean=float(cost.mean()))
    rows = []
    for row in ev["rows"]:
        if row["kind"] == "learned":
            continue
        if row["name"].startswith("binary"):
            row = {**row, "mean_latency_ms": row["mean_latency_ms"] + float(cost.mean()),
                   "p90_latency_ms": row["p90_latency_ms"] + float(cost.mean()), "probe_ms_mean": float(cost.mean())}
            row["speedup_vs_large_reason"] = ref / row["mean_latency_ms"] if ref else None
        rows.append(row)
    curve = pd.DataFrame(ev["curve"]).rename(columns={"tau": "param"})
    curve["mean_latency_ms"] += float(cost.mean())
    lo, hi = ev["auc_range_ms"]
    t = ev["target"]
    met = learned["accuracy"] >= ev["required_test"] if t["kind"] == "accuracy" else learned["mean_latency_ms"] <= t["value"]
    return {**ev, "rows": [*rows, learned], "curve": curve.rename(columns={"param": "tau"}).to_dict(orient="records"),
            "auc": area_under_curve(curve, lo, hi), "target_met_test": bool(met),
            "utility": utility(learned, t, ev["reference_accuracy_test"], len(test))}


def lightgbm_comparison(config, split, candidates, features, paid, labels_hash, ev: dict) -> dict:
    """A LightGBM router on the same split and features, calibrated to the same target: its row and AUC."""
    from .calibrate import calibrate_tau, sweep_tau
    from .costs import realized_correct, realized_latency
    from .evaluate import area_under_curve, summarize
    from .pipeline import fit_router

    router = fit_router(config, split, candidates, features, paid, labels_hash)
    p = router.policy
    op = calibrate_tau(router.predict_proba(split.calibration), p.expected_cost_ms, p.fallback, split.calibration,
                       p.mode, paid, config.target, candidates, config.calibration_margin)
    test = split.test
    chosen = router.decide_with_tau(test, op.param)
    ref = next((r["mean_latency_ms"] for r in ev["rows"] if r["kind"] == "single" and r["name"] == "large_reason"), None)
    row = summarize(f"lightgbm (tau={op.param:.3f})", "comparison", realized_correct(test, chosen),
                    realized_latency(test, chosen, p.mode, paid), chosen, ref, param=op.param)
    curve = sweep_tau(router.predict_proba(test), p.expected_cost_ms, p.fallback, test, p.mode, paid)
    return {"row": row, "auc": area_under_curve(curve, *ev["auc_range_ms"]), "tau": op.param, "router": router}


def side_by_side(ev: dict, comparison: dict | None) -> dict:
    """Insert the LightGBM row just before the learned (probe) row; record both AUCs."""
    if comparison is None:
        return ev
    rows = [*ev["rows"][:-1], comparison["row"], ev["rows"][-1]]
    return {**ev, "rows": rows, "comparison": {"lightgbm": {"auc": comparison["auc"], "tau": comparison["tau"],
                                                            **{k: comparison["row"][k] for k in
                                                               ("accuracy", "mean_latency_ms", "p90_latency_ms")}}}}


def summary_line(ev: dict) -> str:
    probe = ev.get("probe", {})
    text = (f"probe: {probe.get('cost_ms_mean', float('nan')):.1f} ms per sample included "
            f"(shared small_direct prefill: {'yes' if probe.get('shared_prefill') else 'no'}; median own pass "
            f"{probe.get('own_ms_median', float('nan')):.1f} ms, shared pass {probe.get('shared_ms_median', float('nan')):.1f} ms)")
    if "comparison" in ev:
        text += f"; AUC lora-probe {ev['auc']:.3f} vs lightgbm {ev['comparison']['lightgbm']['auc']:.3f}"
    return text
