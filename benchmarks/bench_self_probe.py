"""Benchmark the self-probe (issue 18) against LightGBM on fresh toy eval labels: how well each predicts whether
`large_direct` is right (AUROC, Brier), each rule's accuracy/latency frontier, the certified choice, and what the
self-probe costs (hidden-state recompute at training time, head time per decision at run time).

Both routers are trained in cascade mode on the bundled toy labels (train-router's split, same target and delta);
both are then scored on eval labels of samples neither saw. The self-probe's eval inputs are the large model's
hidden states of its large_direct pass on each eval sample, recomputed by the pipeline RoutedVLM runs.

Run (toy eval labels first: python -m routedvlm.data.toyworld.make_labels --split eval --n 500 --out eval500.parquet):
  OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_self_probe.py --toy-eval eval500.parquet
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_policy import GAP, format_world, world_rows  # noqa: E402  (same frontier machinery and table)


def train(kind: str, labels, meta, args):
    from routedvlm.training.config import TrainConfig
    from routedvlm.training.pipeline import train_router

    cfg = TrainConfig(router=kind, mode="cascade", target_accuracy=args.target, delta=args.delta, no_mlflow=True,
                      output_dir=str(args.out / kind),
                      hidden_layers=args.layers, hidden_position=args.position)
    t0 = time.perf_counter()
    result = train_router(cfg, labels, meta)
    return result, time.perf_counter() - t0


def quality(y: np.ndarray, p: np.ndarray) -> dict:
    from sklearn.metrics import brier_score_loss, roc_auc_score

    return {"auroc": float(roc_auc_score(y, p)), "brier": float(brier_score_loss(y, p))}


def decide_us(router, df, repeats: int) -> float:
    """Median microseconds per `decide()` over the first rows of `df` (the run-time path, one request at a time)."""
    rows = df.head(50).to_dict(orient="records")
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for r in rows:
            router.decide(r)
        times.append((time.perf_counter() - t0) / len(rows) * 1e6)
    return float(np.median(times))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--toy-eval", type=Path, required=True, help="freshly labelled toy eval labels (>= 500 rows)")
    ap.add_argument("--target", type=float, default=0.95, help="--target-accuracy of both routers")
    ap.add_argument("--delta", type=float, default=0.1)
    ap.add_argument("--layers", default=None, help="self-probe --hidden-layers (default: 2/3 of the depth)")
    ap.add_argument("--position", default="all_mean", help="self-probe --hidden-position")
    ap.add_argument("--out", type=Path, default=Path("runs/bench-self-probe"))
    args = ap.parse_args()

    from routedvlm.data.labels.schema import read_labels
    from routedvlm.router.strategies import LARGE_DIRECT
    from routedvlm.training.labels_io import load_labels
    from routedvlm.training.probe.data import attach_samples
    from routedvlm.training.probe.self_probe import attach_hidden

    labels, meta = load_labels(None)
    eval_df, eval_meta = read_labels(args.toy_eval)
    lgb, lgb_s = train("lightgbm", labels, meta, args)
    sp, sp_s = train("self-probe", labels, meta, args)
    hidden = sp.router.policy.params["hidden"]
    recompute = sp.router.policy.params["recomputed"]
    eval_h, info = attach_hidden(attach_samples(eval_df, eval_meta), eval_meta, Path(sp.router.policy.params["large_model"]),
                                 hidden["layers"], hidden["position"])
    y = eval_h[f"correct__{LARGE_DIRECT}"].to_numpy(dtype=int)
    q = {"lightgbm": quality(y, lgb.router.predict_proba(eval_h)[LARGE_DIRECT].to_numpy()),
         "self-probe": quality(y, sp.router.predict_proba(eval_h)[LARGE_DIRECT].to_numpy())}
    world = world_rows("toy world, cascade (bundled labels -> fresh eval labels)",
                       [("lightgbm", lgb, lgb.router), ("self-probe", sp, sp.router)], eval_h)
    us = {"lightgbm": decide_us(lgb.router, eval_h, 5), "self-probe": decide_us(sp.router, eval_h, 5)}
    large_direct_ms = float(eval_h[f"latency_ms__{LARGE_DIRECT}"].mean())

    print(format_world(world))
    print(f"\nP(large_direct correct) on {len(y)} eval rows (large_direct right on {y.mean():.3f}):")
    for name, v in q.items():
        print(f"  {name:<11} AUROC {v['auroc']:.3f}  Brier {v['brier']:.4f}")
    print(f"  self-probe / lightgbm: AUROC {q['self-probe']['auroc'] / q['lightgbm']['auroc']:.3f}x, "
          f"Brier {q['self-probe']['brier'] / q['lightgbm']['brier']:.3f}x")
    by = {r["rule"]: r for r in world["rules"]}
    print(f"\nfrontier speed-up at accuracy >= large_reason - {GAP * 100:.0f} points ({world['threshold']:.3f}), "
          "self-probe vs lightgbm, same rule:")
    for chain in ("tau", "lagrangian", "binary"):
        a, b = by.get(f"{chain} (self-probe)"), by.get(f"{chain} (lightgbm)")
        if a and b:
            fa, fb = a["at_threshold"], b["at_threshold"]
            ratio = f"{fa[0] / fb[0]:.3f}x" if fa and fb else "n/a"
            print(f"  {chain:<11} self-probe {fa[0] if fa else float('nan'):.2f}x, lightgbm "
                  f"{fb[0] if fb else float('nan'):.2f}x -> ratio {ratio}")
    print(f"\ncost: hidden-state recompute (training) {recompute['seconds']:.1f} s for {recompute['rows']} rows "
          f"({recompute['seconds'] / max(recompute['rows'], 1) * 1e3:.0f} ms/row); eval rows {info.seconds:.1f} s; "
          f"train-router wall time lightgbm {lgb_s:.1f} s, self-probe {sp_s:.1f} s ({sp_s / lgb_s:.1f}x)")
    print(f"run time: decide() lightgbm {us['lightgbm']:.0f} us, self-probe {us['self-probe']:.0f} us "
          f"({us['self-probe'] / us['lightgbm']:.2f}x); large_direct itself {large_direct_ms:.1f} ms per request "
          f"(head = {us['self-probe'] / 1e3 / large_direct_ms * 100:.3f} % of it); no extra model pass")
    args.out.mkdir(parents=True, exist_ok=True)
    out = {"world": world, "quality_large_direct": q, "decide_us": us, "hidden": hidden, "recompute": recompute,
           "train_seconds": {"lightgbm": lgb_s, "self-probe": sp_s}}
    (args.out / "bench_self_probe.json").write_text(json.dumps(out, indent=2, default=float) + "\n")
    print(f"\nwrote {args.out / 'bench_self_probe.json'}")


if __name__ == "__main__":
    main()
