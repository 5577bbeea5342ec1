"""The ladder policy against its best two-model sub-pair, on synthetic ladder labels (training/synthetic_ladder.py),
side by side in one run: train-router (LightGBM, --cv-folds 0) at the default target (0.95 x the best single
strategy, delta 0.1) in every cascade shape (the default climb small_direct + mid_direct; paying only mid_direct,
large_direct or small_direct) and one-shot; the sub-pairs of the first run (each certified at the same target against
the same reference). Prints test accuracy, mean latency and the ratio ladder / best feasible pair per shape.

Run: OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_ladder_synthetic.py [--rows 4000] [--seed 5]
"""
from __future__ import annotations

import argparse
import logging
import tempfile

SHAPES = [("climb small+mid (default)", {}), ("pay mid_direct", {"features": "prompt,mid_direct"}),
          ("pay large_direct", {"features": "prompt,large_direct"}),
          ("pay small_direct", {"features": "prompt,small_direct"}), ("one-shot", {"mode": "one-shot"})]


def main(argv=None) -> int:
    from routedvlm.training.config import TrainConfig
    from routedvlm.training.pipeline import train_router
    from routedvlm.training.synthetic_ladder import ladder_metadata, make_ladder_labels

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    df = make_ladder_labels(args.rows, seed=args.seed)
    meta = ladder_metadata(df, args.seed)
    best_pair = None
    print(f"{'policy':<34} {'acc':>6} {'mean ms':>9} {'vs best pair':>13}  rule")
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, kw) in enumerate(SHAPES):
            config = TrainConfig(output_dir=tmp, cv_folds=0, num_boost_round=100, no_mlflow=True,
                                 no_pair_comparison=i > 0, **kw)
            rows = train_router(config, df, meta).evaluation["rows"]
            if i == 0:
                pairs = [r for r in rows if r["kind"] == "pair"]
                for p in pairs:
                    print(f"{'pair ' + '/'.join(p['pair']):<34} {p['accuracy']:>6.3f} {p['mean_latency_ms']:>9.0f} "
                          f"{'':>13}  {p['name'].split(': ', 1)[1]}")
                feasible = [p for p in pairs if p["feasible"]]
                best_pair = min(feasible, key=lambda p: p["mean_latency_ms"]) if feasible else None
            r = rows[-1]
            ratio = f"{r['mean_latency_ms'] / best_pair['mean_latency_ms']:.3f}x" if best_pair else "-"
            print(f"{'ladder ' + name:<34} {r['accuracy']:>6.3f} {r['mean_latency_ms']:>9.0f} {ratio:>13}  "
                  f"{r['name'][len('chosen: '):]}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
