"""Benchmark train-router: training time on 10k synthetic label rows and single-row `decide` latency.

Goals (issue 4): < 60 s to train on 2 cores; < 1 ms p50 per decision.
Run: .venv/bin/python benchmarks/bench_train_router.py [--rows 10000] [--decisions 2000]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--decisions", type=int, default=2_000)
    ap.add_argument("--mode", default="cascade", choices=("cascade", "one-shot"))
    ap.add_argument("--mlflow", action="store_true", help="also time logging + registering into a temporary sqlite store")
    args = ap.parse_args()

    from routedvlm.router.load import load_router
    from routedvlm.training.config import TrainConfig
    from routedvlm.training.pipeline import train_router
    from routedvlm.training.synthetic import make_synthetic_labels

    t0 = time.perf_counter()
    df = make_synthetic_labels(args.rows, seed=0)
    t_gen = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        res = train_router(TrainConfig(output_dir=str(Path(tmp) / "out"), no_mlflow=True, mode=args.mode), df, {})
        t_train = time.perf_counter() - t0
        router = load_router(Path(tmp) / "out" / "router")
        t_mlflow = _time_mlflow(res, df, Path(tmp)) if args.mlflow else None
    rows = [r for r in res.test[router.policy.decision_features].to_dict(orient="records")]
    for r in rows[:50]:  # warm-up
        router.decide(r)
    times = []
    for i in range(args.decisions):
        row = rows[i % len(rows)]
        t = time.perf_counter_ns()
        router.decide(row)
        times.append((time.perf_counter_ns() - t) / 1e6)
    p50, p99 = np.percentile(times, [50, 99])
    ev = res.evaluation
    learned = ev["rows"][-1]
    print(f"rows={args.rows} mode={args.mode} strategies={len(router.policy.strategies)} "
          f"features={len(router.policy.features)} split={ev['split']}")
    print(f"generate labels      {t_gen:8.2f} s")
    print(f"train-router (no MLflow: split, fit, certify, evaluate, save, plot)  {t_train:8.2f} s  "
          f"(goal < 60 s: {60 / t_train:.1f}x headroom)")
    if t_mlflow is not None:
        print(f"MLflow log + register (import, run, dataset input, pyfunc model, alias)  {t_mlflow:8.2f} s")
    print(f"decide() one row     p50 {p50:.3f} ms  p99 {p99:.3f} ms  over {args.decisions} calls  "
          f"(goal p50 < 1 ms: {1 / p50:.1f}x headroom)")
    print(f"learned policy on test: accuracy {learned['accuracy']:.3f}, mean {learned['mean_latency_ms']:.0f} ms, "
          f"speed-up vs large_reason {learned['speedup_vs_large_reason']:.2f}x, target met: {ev['target_met_test']}")


def _time_mlflow(res, df, tmp: Path) -> float:
    from routedvlm.training.config import TrainConfig
    from routedvlm.training.tracking import track

    t0 = time.perf_counter()
    track(TrainConfig(tracking_uri=f"sqlite:///{tmp}/mlruns/mlflow.db"), res, df)
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
