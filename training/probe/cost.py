"""The LoRA probe's own pass priced on the labels' clock: the cost every rule that reads the probe is charged.

The labels' stage latencies were measured by the labeller on its machine, threads and load; timing the probe alone in
train-router's process would put it on another clock (on the shared toy machine it read ~4 % of `large_reason` where
~10-12 % holds under the labeller's conditions). So the probe's pass is timed here side by side (interleaved, same
rows, same process) with a reference stage the labels measured, run through the labeller's own pipeline code
(`data.labels.add_features.small_pipeline`): the small model's `small_direct` stage. The charge is

    charged_ms = (median probe pass ms / median reference stage ms, both measured here) x median labels' reference ms

on the training rows, recorded in the probe's evaluation and policy.json (`params.probe_ms`). Labels without the
reference column (or whose small model cannot be run here) fall back to the probe's own median time, said so.
"""
from __future__ import annotations

import logging
import time

import numpy as np

log = logging.getLogger(__name__)
REFERENCE_STAGES = ("small_direct",)  # label stages a probe pass is put on the labels' clock with


def reference_stage(labels) -> str | None:
    """The first reference stage whose latency the labels recorded (finite on some row), else None."""
    for stage in REFERENCE_STAGES:
        col = f"latency_ms__{stage}"
        if col in labels.columns and np.isfinite(labels[col].to_numpy(dtype=float)).any():
            return stage
    return None


def timed_side_by_side(probe_pass, reference_pass, rows, clock=time.perf_counter) -> tuple[np.ndarray, np.ndarray]:
    """(probe ms per row, reference ms per row): both callables run on each row in turn, after one untimed warm-up."""
    rows = list(rows)
    if rows:
        reference_pass(rows[0])
        probe_pass(rows[0])
    own, ref = [], []
    for row in rows:
        t0 = clock()
        reference_pass(row)
        t1 = clock()
        probe_pass(row)
        t2 = clock()
        ref.append((t1 - t0) * 1000)
        own.append((t2 - t1) * 1000)
    return np.asarray(own, dtype=float), np.asarray(ref, dtype=float)


def charged_ms(ratio: float, labels, stage: str) -> float:
    """`ratio` (probe pass / reference stage, measured side by side) x the labels' median latency of `stage`."""
    values = labels[f"latency_ms__{stage}"].to_numpy(dtype=float)
    return float(ratio * np.median(values[np.isfinite(values)]))


def on_labels_clock(net, split, metadata: dict, base, *, shared_ms: float, n: int = 12) -> dict:
    """Price the probe's own pass (and its shared pass, `shared_ms` measured by the caller in this process) on the
    labels' clock. Returns {reference_stage, ratio, shared_ratio, own_ms_here, reference_ms_here, reference_labels_ms,
    own_charged_ms, shared_charged_ms, rows}; reference_stage None (and why) when it cannot."""
    from routedvlm.data.labels.add_features import run_small_stage, small_pipeline
    from routedvlm.errors import RoutedVLMError

    stage = reference_stage(split.train)
    if stage is None or base is None:
        return {"reference_stage": None, "why": "the labels record no small_direct latency" if stage is None else
                "no small checkpoint to re-time the labels' stage with"}
    rows = split.test.head(n).to_dict(orient="records")
    try:
        pipe, side = small_pipeline(base, metadata)
        side.start()
    except (RoutedVLMError, OSError) as exc:
        log.warning("cannot run the labels' small model to price the probe on the labels' clock: %s", exc)
        return {"reference_stage": None, "why": f"the small model could not be run here ({exc})"}
    try:
        own, ref = timed_side_by_side(lambda r: net.p_correct(r),
                                      lambda r: run_small_stage(pipe, r["image"], r["question"], stage), rows)
    finally:
        side.close()
    ratio = float(np.median(own) / np.median(ref))
    shared_ratio = float(shared_ms / np.median(ref))
    labels_ms = charged_ms(1.0, split.train, stage)
    return {"reference_stage": stage, "ratio": ratio, "shared_ratio": shared_ratio,
            "own_ms_here": float(np.median(own)), "reference_ms_here": float(np.median(ref)),
            "reference_labels_ms": labels_ms, "own_charged_ms": charged_ms(ratio, split.train, stage),
            "shared_charged_ms": charged_ms(shared_ratio, split.train, stage), "rows": len(rows)}
