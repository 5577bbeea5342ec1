"""Benchmark the decision-rule family: the accuracy/latency frontier of every rule on held-out labels, and the
certified choice, on the toy world and on synthetic labels with a known ground truth.

Per world: routers are fitted and certified (training/calibration/certify.py) on training labels; then, on held-out eval labels,
every rule is swept over its whole parameter grid (its frontier: parameters picked with hindsight on the eval rows,
an upper bound of what calibration can reach), next to the fixed baselines (single strategies, mutual verification at
every K), the oracle, and the certified choice of each router (parameters picked on the calibration rows, no
hindsight). Speed-up = mean latency of large_reason / the policy's, at accuracy >= large_reason's - 2 points.
Goals (issue 14, toy world): the chosen policy is dominated by no baseline; at large_reason - 2 points it needs at
most 40 % of large_reason's latency (speed-up >= 2.5x).

Run (toy eval labels first: python -m routedvlm.data.toyworld.make_labels --split eval --n 500 --out eval500.parquet):
  OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_policy.py --toy-eval eval500.parquet [--routers lightgbm,lora-probe]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

GAP = 0.02  # "large_reason - 2 points"


def fit_and_certify(labels, metadata, kind: str, mode: str, target: float, delta: float, out: Path):
    """A router of `kind` in `mode` trained on `labels` (train-router's split), certified; (result, router)."""
    from routedvlm.router.router_types import type_facts
    from routedvlm.training.config import TrainConfig
    from routedvlm.training.pipeline import train_router

    cfg = TrainConfig(router=kind, mode=mode, with_small_direct=type_facts(kind).small_prefill and mode == "cascade",
                      target_accuracy=target, delta=delta, no_mlflow=True,
                      output_dir=str(out / f"{kind}-{mode}"))
    result = train_router(cfg, labels, metadata)
    return result, result.router


def frontier(points: pd.DataFrame) -> pd.DataFrame:
    """The Pareto frontier (no other point at least as accurate and at most as slow) of (accuracy, mean latency)."""
    pts = points.sort_values(["mean_latency_ms", "accuracy"], ascending=[True, False])
    keep, best = [], -np.inf
    for i, r in pts.iterrows():
        if r["accuracy"] > best + 1e-12:
            keep.append(i)
            best = r["accuracy"]
    return pts.loc[keep]


def speedup_at(points: pd.DataFrame, threshold: float, ref_ms: float):
    """(speed-up, accuracy, ms) of the fastest point with accuracy >= threshold, or None."""
    ok = points[points["accuracy"] >= threshold - 1e-12]
    if ok.empty:
        return None
    best = ok.sort_values("mean_latency_ms").iloc[0]
    return ref_ms / best["mean_latency_ms"], float(best["accuracy"]), float(best["mean_latency_ms"])


def sweep(scorer, members) -> pd.DataFrame:
    rows = []
    for m in members:
        correct, latency, _ = scorer.score(m)
        rows.append({"param": m.rule.get("param"), "accuracy": float(correct.mean()),
                     "mean_latency_ms": float(latency.mean())})
    return pd.DataFrame(rows)


def world_rows(name: str, routers: list, eval_df: pd.DataFrame) -> dict:
    """Every rule's frontier, the fixed baselines and each router's certified choice on `eval_df`."""
    from routedvlm.training.evaluate import oracle_row
    from routedvlm.training.calibration.rule_family import Member, Scorer, baseline_members, model_chains, with_agreement

    df = with_agreement(eval_df)
    ref_ms = float(df["latency_ms__large_reason"].mean())
    threshold = float(df["correct__large_reason"].mean()) - GAP
    out = {"world": name, "n_eval": len(df), "large_reason_accuracy": threshold + GAP, "large_reason_ms": ref_ms,
           "threshold": threshold, "rules": [], "baselines": [], "chosen": []}
    for label, result, router in routers:
        cert = result.evaluation["certificate"]
        cost = float(result.evaluation.get("probe", {}).get("cost_ms_mean", 0.0))
        scorer = Scorer(router, df, model_cost_ms=cost)
        chains = model_chains(router.policy, scorer.strategies, cert["router_mode"], cert["router_paid_stages"])
        for chain, members in chains.items():
            pts = sweep(scorer, members)
            out["rules"].append({"rule": f"{chain} ({label})", "points": pts.to_dict(orient="records"),
                                 "frontier": frontier(pts).to_dict(orient="records"),
                                 "at_threshold": speedup_at(pts, threshold, ref_ms), "best_accuracy": pts["accuracy"].max()})
        p = router.policy
        correct, latency, _ = scorer.score(Member(p.decision_rule, "chosen", p.mode, tuple(p.paid_stages)))
        out["chosen"].append({"router": label, "rule": cert["chosen"], "feasible": cert["feasible"],
                              "accuracy": float(correct.mean()), "mean_latency_ms": float(latency.mean()),
                              "required": (threshold + GAP - cert["bound"]) if cert["bound_meaning"].startswith(
                                  "accuracy >= accuracy(") else cert["bound"]})
    for m in baseline_members(df):
        correct, latency, _ = Scorer(None, df).score(m)
        out["baselines"].append({"name": m.name, "accuracy": float(correct.mean()), "mean_latency_ms": float(latency.mean())})
    o = oracle_row(df, [s for s in Scorer(None, df).strategies], ref_ms)
    out["oracle"] = {"accuracy": o["accuracy"], "mean_latency_ms": o["mean_latency_ms"]}
    for c in out["chosen"]:
        c["dominated_by"] = [b["name"] for b in out["baselines"] + [{"name": f"certified {d['router']}", **d}
                                                                       for d in out["chosen"] if d is not c]
                             if b["accuracy"] >= c["accuracy"] and b["mean_latency_ms"] <= c["mean_latency_ms"]
                             and (b["accuracy"] > c["accuracy"] or b["mean_latency_ms"] < c["mean_latency_ms"])]
    return out


def format_world(w: dict) -> str:
    ref = w["large_reason_ms"]
    lines = [f"== {w['world']}: {w['n_eval']} eval rows; large_reason {w['large_reason_accuracy']:.3f} at {ref:.1f} ms; "
             f"threshold large_reason - {GAP * 100:.0f} points = {w['threshold']:.3f}",
             f"{'policy':<44} {'points':>6} {'speed-up at >= thr':>26} {'best acc':>9}", "-" * 90]
    for r in w["rules"]:
        at = r["at_threshold"]
        cell = f"{at[0]:.2f}x ({at[1]:.3f}, {at[2]:.1f} ms)" if at else "never reaches it"
        lines.append(f"{r['rule'] + ' frontier':<44} {len(r['points']):>6} {cell:>26} {r['best_accuracy']:>9.3f}")
    for b in w["baselines"] + [{"name": "oracle", **w["oracle"]}]:
        ok = b["accuracy"] >= w["threshold"] - 1e-12
        cell = f"{ref / b['mean_latency_ms']:.2f}x ({b['accuracy']:.3f}, {b['mean_latency_ms']:.1f} ms)"
        lines.append(f"{b['name']:<44} {1:>6} {cell + ('' if ok else ' below'):>26} {b['accuracy']:>9.3f}")
    lines.append("certified choice (parameters from the calibration rows, no hindsight):")
    for c in w["chosen"]:
        verdict = "met" if c["accuracy"] >= c["required"] - 1e-12 else f"missed by {c['required'] - c['accuracy']:.3f}"
        lines.append(f"  {c['router']:<18} {c['rule']:<44} {c['accuracy']:.3f} at {c['mean_latency_ms']:.1f} ms "
                     f"({ref / c['mean_latency_ms']:.2f}x); target {c['required']:.3f} {verdict}; "
                     f"{'certified' if c['feasible'] else 'NOT certified'}; dominated by: "
                     f"{', '.join(c['dominated_by']) or 'nothing'}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--toy-eval", type=Path, help="freshly labelled toy eval labels (>= 500 rows); omit to skip")
    ap.add_argument("--routers", default="lightgbm", help="lightgbm and/or lora-probe (toy world only)")
    ap.add_argument("--target", type=float, default=0.95, help="--target-accuracy of every router")
    ap.add_argument("--delta", type=float, default=0.1)
    ap.add_argument("--synthetic-rows", type=int, default=4000, help="synthetic training rows (eval: 2000 fresh)")
    ap.add_argument("--out", type=Path, default=Path("runs/bench-policy"))
    args = ap.parse_args()

    from routedvlm.data.labels.schema import read_labels
    from routedvlm.training.labels_io import load_labels
    from routedvlm.training.synthetic import make_synthetic_labels

    worlds = []
    if args.toy_eval:
        labels, meta = load_labels(None)
        eval_df, _ = read_labels(args.toy_eval)
        routers = []
        for kind in [k.strip() for k in args.routers.split(",") if k.strip()]:
            for mode in ("cascade", "one-shot"):
                result, router = fit_and_certify(labels, meta, kind, mode, args.target, args.delta, args.out / "toy")
                routers.append((f"{kind} {mode}", result, router))
        if any(r[0].startswith("lora-probe") for r in routers):
            from routedvlm.training.probe.data import attach_samples

            _, eval_meta = read_labels(args.toy_eval)
            eval_df = attach_samples(eval_df, eval_meta)
        worlds.append(world_rows("toy world (bundled labels -> fresh eval labels)", routers, eval_df))
    train = make_synthetic_labels(args.synthetic_rows, seed=0)
    routers = []
    for mode in ("cascade", "one-shot"):
        result, router = fit_and_certify(train, {"content_hash": "synthetic-0"}, "lightgbm", mode, args.target,
                                         args.delta, args.out / "synthetic")
        routers.append((f"lightgbm {mode}", result, router))
    worlds.append(world_rows("synthetic labels (seed 0 -> fresh seed 1)", routers, make_synthetic_labels(2000, seed=1)))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_policy.json").write_text(json.dumps(worlds, indent=2, default=float) + "\n")
    print("\n\n".join(format_world(w) for w in worlds))
    print(f"\nwrote {args.out / 'bench_policy.json'}")


if __name__ == "__main__":
    main()
