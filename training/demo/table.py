"""The demo's side-by-side table: live RoutedVLM rows beside rows derived from the eval split's labels.

Every row has the same columns (accuracy, mean and p90 latency, speed-up vs `large_reason`, whether the champion's
certified target held on the eval split with its standard error, strategy mix) and a `source`: `live` (measured
now through RoutedVLM) or `labels` (composed from the eval labels of the same samples). Latency is the same quantity
in both: the sum of the wall-clock ms (vision + prefill + decode) of the stage records the policy needs on a sample
(`LATENCY_NOTE`). The eval target is what the certificate promises on these samples: accuracy(reference) - bound
(regret targets) or the bound (absolute ones); SE = sqrt(r (1 - r) / n_eval) at that accuracy r. Written as JSON,
markdown and an accuracy-latency PNG.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from routedvlm.router.strategies import LARGE_REASON

from ..costs import label_strategies
from ..evaluate import area_under_curve, mutual_verification_row, oracle_row, summarize, verdict
from ..steps import jsonable

LATENCY_NOTE = (
    "latency = sum of the wall-clock ms (vision + prefill + decode) of the stage records a policy needs on a sample; "
    "speed-up = mean latency of large_reason measured by the same source / the row's. "
    "source `live`: RoutedVLM's own trace (`RoutedOutput.latency_ms`: the stages that ran, incl. the two-stage "
    "escalation from the cached prefix, + feature and decision time). "
    "source `labels`: the labeller's stage records (`label_sample`, as in `routedvlm label`) for the same samples, "
    "composed per strategy as if it ran alone (data/labelling/latency.py); a cascade pays large_direct (+ small_direct if "
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


def replay(name: str, router, eval_df: pd.DataFrame, ref: float | None, model_cost_ms: float = 0.0) -> dict:
    """The router's decisions on the eval labels under its policy's rule, priced and scored from the labels (no
    model runs; a probe's own cost is charged when the rule reads it)."""
    from ..calibration.rule_family import Member, Scorer

    p = router.policy
    member = Member(p.decision_rule, "chosen", p.mode, tuple(p.paid_stages))
    correct, latency, chosen = Scorer(router, eval_df, model_cost_ms=model_cost_ms).score(member)
    return summarize(name, "replay", correct, latency, chosen, ref, source="labels")


def _probe_cost(trained) -> float:
    return float(trained.result.evaluation.get("probe", {}).get("cost_ms_mean", 0.0))


def replay_rows(trained: list, best, binary, binary_from, eval_df: pd.DataFrame, ref, mv_k: int) -> list[dict]:
    """The champion and every trained router's chosen rule replayed, the binary rule, mutual verification,
    every single strategy and the oracle, from the eval labels."""
    rows = [replay(f"champion: {best.name} (replayed)", best.result.router, eval_df, ref, _probe_cost(best))]
    rows += [replay(f"{t.name}: {t.result.evaluation['certificate']['chosen']} (replayed)", t.result.router, eval_df,
                    ref, _probe_cost(t)) for t in trained]
    if binary is not None:
        rows.append(replay(f"binary large_direct/large_reason (replayed, {binary_from.name})", binary, eval_df, ref,
                           _probe_cost(binary_from)))
    return rows + label_rows(eval_df, list(best.result.router.policy.strategies), mv_k, ref)


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


def eval_target(eval_df: pd.DataFrame, certificate: dict) -> dict:
    """What the champion's certificate promises on the eval samples: {required, se, text}."""
    bound, n = certificate.get("bound"), len(eval_df)
    if bound is None:
        return {"required": None, "se": None, "text": "no certified accuracy (latency budget)"}
    if certificate["bound_meaning"].startswith("accuracy >= accuracy("):
        ref = certificate["reference"]
        acc = float(eval_df[f"correct__{ref}"].mean())
        required, text = acc - bound, f"accuracy({ref}) on eval {acc:.3f} - {bound:.4f}"
    else:
        required, text = bound, f"{bound:.4f}"
    return {"required": required, "se": float(np.sqrt(required * (1 - required) / n)), "text": text}


def with_verdicts(rows: list[dict], target: dict) -> list[dict]:
    """Each row with `target_met` and `verdict` against the eval target."""
    if target["required"] is None:
        return [{**r, "target_met": None, "verdict": "-"} for r in rows]
    t = {"kind": "accuracy"}
    return [{**r, "target_met": r["accuracy"] >= target["required"] - 1e-12,
             "verdict": verdict(r, t, target["required"], target["se"])} for r in rows]


def rule_curves(best, eval_df: pd.DataFrame) -> dict:
    """The champion's parameterised rules swept on the eval labels (empty when its rule reads no model)."""
    from routedvlm.router.decision_rules import uses_model

    from ..calibration.rule_family import Scorer, model_chains

    router = best.result.router
    if not uses_model(router.policy.decision_rule):
        return {}
    scorer, out = Scorer(router, eval_df, model_cost_ms=_probe_cost(best)), {}
    for chain, members in model_chains(router.policy, label_strategies(eval_df)).items():
        pts = []
        for m in members:
            correct, latency, _ = scorer.score(m)
            pts.append((m.rule["param"], float(correct.mean()), float(latency.mean())))
        out[chain] = pd.DataFrame(pts, columns=["param", "accuracy", "mean_latency_ms"])
    return out


def _mix(mix: dict, n: int = 3) -> str:
    items = sorted(mix.items(), key=lambda kv: -kv[1])
    return " ".join(f"{k}:{v:.0%}" for k, v in items[:n]) + (" ..." if len(items) > n else "")


def _cells(r: dict) -> list[str]:
    sp = r["speedup_vs_large_reason"]
    return [r["name"], r["source"], f"{r['accuracy']:.3f}", f"{r['mean_latency_ms']:.1f}", f"{r['p90_latency_ms']:.1f}",
            f"{sp:.2f}x" if sp else "-", r.get("verdict", "-"), _mix(r["mix"])]


HEADERS = ["policy", "source", "acc", "mean ms", "p90 ms", "speed-up", "target on eval", "mix"]
WIDTHS = [58, 7, 6, 9, 9, 8, 28, 0]


def format_text(rows: list[dict]) -> str:
    """Fixed-width terminal table."""
    def line(cells):
        out = [cells[0][:WIDTHS[0]].ljust(WIDTHS[0]), cells[1].ljust(WIDTHS[1])]
        out += [c.rjust(w) for c, w in zip(cells[2:6], WIDTHS[2:6])]
        return " ".join(out) + "  " + cells[6].ljust(WIDTHS[6]) + " " + cells[7]
    head = line(HEADERS)
    return "\n".join([head, "-" * len(head), *(line(_cells(r)) for r in rows)])


def format_markdown(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(_cells(r)) + " |" for r in rows]
    return "\n".join(lines)


def certificate_lines(header: dict) -> list[str]:
    """The champion's certificate and what it promises on the eval samples."""
    cert, target = header["certificate"], header["eval_target"]
    each, after = cert.get("delta_each", cert.get("delta")), cert.get("delta_after_selection", cert.get("delta"))
    joint = (f" [delta_each {each:g} per router x {header['n_routers']} routers compared = delta_after_selection "
             f"{after:g}: the level that holds for the champion]" if header.get("n_routers", 1) > 1 and each else "")
    return [f"certificate (champion {header['champion']}, {cert.get('n')} calibration rows): {cert.get('statement')}"
            + joint,
            f"on the eval split that promises accuracy >= {target['text']} = "
            + (f"{target['required']:.3f} (SE {target['se']:.3f})" if target["required"] is not None else "-")]


def write_outputs(out: Path, rows: list[dict], header: dict, curves: dict) -> dict:
    """table.json, table.md and plot.png under `out`; returns {name: path}."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "table.json", "markdown": out / "table.md", "plot": out / "plot.png"}
    paths["json"].write_text(json.dumps({**header, "latency_note": LATENCY_NOTE, "rows": rows}, indent=2,
                                        default=jsonable) + "\n")
    intro = "\n".join(f"- {k}: {f'{v:.4g}' if isinstance(v, float) else v}" for k, v in header.items()
                      if not isinstance(v, (dict, list)))
    cert = "\n".join(f"- {line}" for line in certificate_lines(header))
    paths["markdown"].write_text(f"# routedvlm demo (toy world)\n\n{intro}\n{cert}\n\n{LATENCY_NOTE}\n\n"
                                 f"{format_markdown(rows)}\n")
    _plot(rows, curves, header, paths["plot"])
    return paths


def _plot(rows: list[dict], curves: dict, header: dict, path: Path) -> None:
    from ..plot import plot_curve

    singles = [r for r in rows if r["kind"] == "single"]
    lo = min(r["mean_latency_ms"] for r in singles)
    hi = max(r["mean_latency_ms"] for r in singles)
    evaluation = {"curves": {k: v.to_dict(orient="records") for k, v in curves.items()},
                  "auc": {k: area_under_curve(v, lo, hi) for k, v in curves.items()},
                  "rows": rows, "mode": header.get("mode", "cascade"), "target": {"kind": "accuracy"},
                  "required_test": header["eval_target"]["required"]}
    plot_curve(evaluation, path, title="routedvlm demo (toy world): RoutedVLM and baselines on the eval split",
               split="eval split")
