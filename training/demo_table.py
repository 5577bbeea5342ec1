"""The demo's side-by-side table: live RoutedVLM rows beside rows derived from the eval split's labels.

Every row has the same columns (accuracy, mean and p90 latency, speed-up vs `large_reason`, strategy mix) and a
`source`: `live` (measured now through RoutedVLM) or `labels` (composed from the eval labels of the same samples).
Latency is the same quantity in both: the sum of the wall-clock ms (vision + prefill + decode) of the stage records
the policy needs on a sample (`LATENCY_NOTE`). Written as JSON, markdown and an accuracy-latency PNG.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from routedvlm.router.strategies import LARGE_REASON

from .costs import realized_correct, realized_latency
from .evaluate import area_under_curve, label_strategies, mutual_verification_row, oracle_row, summarize
from .pipeline import jsonable

LATENCY_NOTE = (
    "latency = sum of the wall-clock ms (vision + prefill + decode) of the stage records a policy needs on a sample; "
    "speed-up = mean latency of large_reason measured by the same source / the row's. "
    "source `live`: RoutedVLM's own trace (`RoutedOutput.latency_ms`: the stages that ran, incl. the two-stage "
    "escalation from the cached prefix, + feature and decision time). "
    "source `labels`: the labeller's stage records (`label_sample`, as in `routedvlm label`) for the same samples, "
    "composed per strategy as if it ran alone (data/latency.py); a cascade pays large_direct (+ small_direct if "
    "needed) + the escalate_K increment. Both are measured per sample back to back, under the same load. The "
    "labeller shares work through a prompt trie, so a strategy's prompt is prefilled in several calls; with models "
    "this small a call's fixed cost dominates and `labels` latencies run higher than `live` ones: compare a live row "
    "with its `(replayed)` twin (same decisions) and speed-ups within one source.")


def reference_ms(eval_df: pd.DataFrame) -> float | None:
    """Mean `large_reason` latency on the eval labels: the speed-up reference of every row."""
    return float(eval_df[f"latency_ms__{LARGE_REASON}"].mean()) if f"latency_ms__{LARGE_REASON}" in eval_df else None


def live_row(name: str, kind: str, records: list[dict], ref: float | None) -> dict:
    """A row from live RoutedVLM records ({correct, latency_ms, strategy, wall_ms})."""
    row = summarize(name, kind, [r["correct"] for r in records], [r["latency_ms"] for r in records],
                    [r["strategy"] for r in records], ref, source="live")
    row["wall_mean_ms"] = float(np.mean([r["wall_ms"] for r in records]))
    return row


def replay_row(router, eval_df: pd.DataFrame, ref: float | None) -> dict:
    """The router's decisions on the eval labels, priced and scored from the labels (no model runs)."""
    p = router.policy
    chosen = router.decide_with_tau(eval_df, p.tau)
    return summarize("learned policy (replayed)", "replay", realized_correct(eval_df, chosen),
                     realized_latency(eval_df, chosen, p.mode, p.paid_stages), chosen, ref, source="labels")


def label_rows(eval_df: pd.DataFrame, candidates: list[str], mv_k: int, ref: float | None) -> list[dict]:
    """Mutual verification (cascade, K = `mv_k`), every single strategy and the oracle, from the eval labels."""
    rows = []
    mv = mutual_verification_row(eval_df, mv_k, ref)
    if mv is not None:
        rows.append({**mv, "name": f"mutual verification K={mv_k} (replayed)", "source": "labels"})
    rows += [{**summarize(s, "single", eval_df[f"correct__{s}"], eval_df[f"latency_ms__{s}"], [s] * len(eval_df), ref),
              "source": "labels"} for s in label_strategies(eval_df)]
    rows.append({**oracle_row(eval_df, candidates, ref), "source": "labels"})
    return rows


def learned_curve(router, eval_df: pd.DataFrame) -> pd.DataFrame:
    """The learned policy's (mean latency, accuracy) at every tau, replayed on the eval labels."""
    from .calibrate import sweep_tau

    p = router.policy
    return sweep_tau(router.predict_proba(eval_df), p.expected_cost_ms, p.fallback, eval_df, p.mode, p.paid_stages)


def _mix(mix: dict, n: int = 3) -> str:
    items = sorted(mix.items(), key=lambda kv: -kv[1])
    return " ".join(f"{k}:{v:.0%}" for k, v in items[:n]) + (" ..." if len(items) > n else "")


def _cells(r: dict) -> list[str]:
    sp = r["speedup_vs_large_reason"]
    return [r["name"], r["source"], f"{r['accuracy']:.3f}", f"{r['mean_latency_ms']:.1f}", f"{r['p90_latency_ms']:.1f}",
            f"{sp:.2f}x" if sp else "-", _mix(r["mix"])]


HEADERS = ["policy", "source", "acc", "mean ms", "p90 ms", "speed-up", "mix"]
WIDTHS = [38, 7, 6, 9, 9, 8, 0]


def format_text(rows: list[dict]) -> str:
    """Fixed-width terminal table."""
    def line(cells):
        out = [cells[0][:WIDTHS[0]].ljust(WIDTHS[0]), cells[1].ljust(WIDTHS[1])]
        out += [c.rjust(w) for c, w in zip(cells[2:6], WIDTHS[2:6])]
        return " ".join(out) + "  " + cells[6]
    head = line(HEADERS)
    return "\n".join([head, "-" * len(head), *(line(_cells(r)) for r in rows)])


def format_markdown(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(_cells(r)) + " |" for r in rows]
    return "\n".join(lines)


def write_outputs(out: Path, rows: list[dict], header: dict, curve: pd.DataFrame) -> dict:
    """table.json, table.md and plot.png under `out`; returns {name: path}."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "table.json", "markdown": out / "table.md", "plot": out / "plot.png"}
    paths["json"].write_text(json.dumps({**header, "latency_note": LATENCY_NOTE, "rows": rows}, indent=2,
                                        default=jsonable) + "\n")
    intro = "\n".join(f"- {k}: {f'{v:.4g}' if isinstance(v, float) else v}" for k, v in header.items()
                      if not isinstance(v, (dict, list)))
    paths["markdown"].write_text(f"# routedvlm demo (toy world)\n\n{intro}\n\n{LATENCY_NOTE}\n\n{format_markdown(rows)}\n")
    _plot(rows, curve, header, paths["plot"])
    return paths


def _plot(rows: list[dict], curve: pd.DataFrame, header: dict, path: Path) -> None:
    from .plot import plot_curve

    singles = [r for r in rows if r["kind"] == "single"]
    lo = min(r["mean_latency_ms"] for r in singles)
    hi = max(r["mean_latency_ms"] for r in singles)
    evaluation = {"curve": curve.to_dict(orient="records"), "auc": area_under_curve(curve, lo, hi),
                  "rows": rows, "mode": header.get("mode", "cascade"),
                  "target": {"kind": "accuracy", "value": header.get("target_accuracy", 0.98)},
                  "required_test": header.get("target_accuracy", 0.98) * max(r["accuracy"] for r in singles)}
    plot_curve(evaluation, path, title="routedvlm demo (toy world): RoutedVLM and baselines on the eval split",
               split="eval split")
