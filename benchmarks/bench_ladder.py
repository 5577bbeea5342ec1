"""The toy ladder (small, mid, large) vs its best two-model sub-pair, both certified at the same accuracy target.

Labels toy `label` samples with the three-model ladder, trains and certifies (train-router, LightGBM, Learn-then-Test)
one policy over every ladder strategy and one over each sub-pair's strategies at the same absolute accuracy target
and level, then replays every certified policy on freshly labelled toy `eval` samples that no step tuned on
(`routedvlm.training.demo.ladder.compare_ladder`, the code `routedvlm demo --ladder` runs). Prints accuracy and mean
latency side by side and the ladder / best-pair mean latency ratio (goal of issue 30: <= 0.85). `--labels` reuses
labels written by an earlier run (`<out>/labels-label.parquet`, `<out>/labels-eval.parquet`): then only the
training, certification and replay run again (e.g. at another target). Label files of earlier runs in `--out`
(`labels-label-s<seed>.parquet`, `labels-eval.parquet`) are reused, so adding a `--label-seeds` value labels only
the new samples.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_ladder.py      # 400 + 200 samples, cascade, targets 0.85 0.88
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_ladder.py --n-label 400 --label-seeds 0 1 --n-eval 200
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_ladder.py --labels runs/bench-ladder --min-accuracy 0.93
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def _args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="runs/bench-ladder", help="folder for labels, routers and result.json")
    p.add_argument("--n-label", type=int, default=400, help="toy `label` samples to label, train and certify on")
    p.add_argument("--n-eval", type=int, default=200, help="fresh toy `eval` samples the policies are replayed on")
    p.add_argument("--min-accuracy", type=float, nargs="+", default=[0.85, 0.88], help="certified accuracy target(s)")
    p.add_argument("--delta", type=float, default=0.1, help="Learn-then-Test level of each certificate")
    p.add_argument("--calib-fraction", type=float, default=0.4, help="share of the labelled rows that certify")
    p.add_argument("--mode", default="cascade", choices=("cascade", "one-shot"), help="router mode of every policy")
    p.add_argument("--label-seeds", type=int, nargs="+", default=[0], help="label --n-label samples per generator "
                   "seed (labels-label-s<seed>.parquet, kept and reused when present) and train on all of them")
    p.add_argument("--labels", default=None, help="reuse the labels of an earlier run in this folder")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv=None) -> int:
    import logging

    from routedvlm.training.demo.ladder import LadderDemoConfig, compare_ladder, concat_labels, label_ladder, table

    logging.basicConfig(level=logging.WARNING)
    args = _args(argv)
    t0 = time.perf_counter()
    cfg = LadderDemoConfig(out=args.out, n_label=args.n_label, n_eval=args.n_eval, min_accuracy=args.min_accuracy[0],
                           delta=args.delta, mode=args.mode, seed=args.seed, progress=False,
                           calib_fraction=args.calib_fraction)
    if args.labels:
        train, evl = Path(args.labels) / "labels-label.parquet", Path(args.labels) / "labels-eval.parquet"
    else:
        out = Path(args.out)
        parts = [out / f"labels-label-s{seed}.parquet" for seed in args.label_seeds]
        for seed, part in zip(args.label_seeds, parts):
            if not part.exists():
                label_ladder(cfg, "label", cfg.n_label, print, seed=seed, name=part.name)
        train = concat_labels(parts, out / "labels-label.parquet")
        evl = out / "labels-eval.parquet"
        if not evl.exists():
            evl = label_ladder(cfg, "eval", cfg.n_eval, print)
    results = []
    for target in args.min_accuracy:
        cfg.min_accuracy = target
        res = compare_ladder(cfg, train, evl, print)
        results.append(res)
        print(f"\n=== certified accuracy >= {target} (delta {args.delta}, {args.mode}); {res['n_label']} labelled, "
              f"{res['n_eval']} fresh eval samples\n")
        print(table(res))
        ratio = res["latency_ratio_ladder_vs_best_pair"]
        lad = res["policies"]["ladder"]
        if ratio is None:
            print("\nno ratio: the ladder or every pair has no certified policy at this target")
        else:
            best = res["policies"][res["best_pair"]]
            print(f"\nladder: acc {lad['accuracy']:.3f}, {lad['mean_latency_ms']:.1f} ms | best pair {res['best_pair']}: "
                  f"acc {best['accuracy']:.3f}, {best['mean_latency_ms']:.1f} ms | latency ratio {ratio:.3f} "
                  f"({abs(100 * (1 - ratio)):.1f} % {'lower' if ratio <= 1 else 'higher'}; goal: >= 15 % lower)")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "result.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"\ndone in {time.perf_counter() - t0:.0f} s; wrote {args.out}/result.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
