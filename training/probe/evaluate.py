"""Evaluate a trained probe like the LightGBM router (same rows, curves, areas), plus the probe's own cost and a
LightGBM router fitted and certified on the same split, side by side in one table.

Probe cost per sample (charged, in calibration and on test, to every rule that reads the probe's P(correct): the
tau, lagrangian and binary rules and their curves; mutual verification and fixed rules do not run the probe): its own
pass (encode + prefill + head), or, when the policy pays `small_direct` (RoutedVLM then shares that prefill), the
shared pass, priced on the labels' clock (cost.py: timed side by side with the labels' small_direct stage).
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


def probe_cost(policy, own_ms: np.ndarray, shared_ms: float, clock: dict | None = None) -> np.ndarray:
    """Per test row: the probe's pass on the labels' clock (`cost.on_labels_clock`: measured side by side with the
    labels' small_direct stage, scaled to the labels' latency of it), the shared pass's when small_direct is paid;
    without a clock, the median of the measured own-pass times here (or the shared pass's)."""
    shared = SMALL_DIRECT in policy.paid_stages
    if clock and clock.get("reference_stage"):
        cost = clock["shared_charged_ms" if shared else "own_charged_ms"]
    else:
        cost = shared_ms if shared else float(np.median(own_ms)) if len(own_ms) else 0.0
    return np.full(len(own_ms), cost)


def lightgbm_comparison(config, split, strategies, features, paid, labels_hash) -> dict | None:
    """A LightGBM router on the same split, features and paid stages, certified to the same target: its chosen
    row and areas (None when there are no tabular features: a one-shot probe on labels without prompt features)."""
    from ..calibration.certify import certify
    from ..evaluate import evaluate
    from ..lightgbm import NAME
    from ..lightgbm.trainer import fit_router

    if not features:
        return None
    router = fit_router(config, split, list(strategies), list(features), list(paid), labels_hash)
    cal = certify(router, split.calibration, split.train, config.target, config.delta)
    theirs = evaluate(router, split.calibration, split.test, config.target, cal)
    row = {**theirs["rows"][-1], "name": f"{NAME} " + theirs["rows"][-1]["name"], "kind": "comparison"}
    return {"row": row, "auc": theirs["auc"], "rule": cal.chosen.member.name, "certificate": cal.certificate(),
            "router": router}


def side_by_side(ev: dict, comparison: dict | None) -> dict:
    """Insert the LightGBM row just before the chosen (probe) row; record both routers' areas."""
    if comparison is None:
        return ev
    rows = [*ev["rows"][:-1], comparison["row"], ev["rows"][-1]]
    from ..lightgbm import NAME

    return {**ev, "rows": rows, "comparison": {NAME: {
        "auc": comparison["auc"], "rule": comparison["rule"], "certificate": comparison["certificate"],
        **{k: comparison["row"][k] for k in ("accuracy", "mean_latency_ms", "p90_latency_ms", "target_met")}}}}


def summary_line(ev: dict) -> str:
    probe = ev.get("probe", {})
    clock = probe.get("clock") or {}
    on = (f"on the labels' clock: {clock['ratio']:.3f} x their {clock['reference_stage']} "
          f"{clock['reference_labels_ms']:.1f} ms" if clock.get("reference_stage") else "timed here, not on the labels' clock")
    text = (f"probe: {probe.get('cost_ms_mean', float('nan')):.1f} ms per sample charged to the rules that read it ({on}) "
            f"(shared small_direct prefill: {'yes' if probe.get('shared_prefill') else 'no'}; median own pass "
            f"{probe.get('own_ms_median', float('nan')):.1f} ms, shared pass {probe.get('shared_ms_median', float('nan')):.1f} ms)")
    if "comparison" in ev:
        from ..lightgbm import NAME

        lg = ev["comparison"][NAME]
        text += (f"; {NAME} on the same split chose {lg['rule']} (target on test "
                 f"{'met' if lg['target_met'] else 'missed'})")
    return text
