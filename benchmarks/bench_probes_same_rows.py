"""The LoRA probe and the self-probe on the same rows (issue 37): AUROC and Brier per strategy on identical test rows.

Side by side in one run, on the bundled toy labels (data/toyworld/labels.parquet): train-router with the same split
(seed, calibration and test shares), mode (cascade: the self-probe reads the large_direct pass, so both pay it), target
and delta, for three router types: `lightgbm` (the tabular reference), `self-probe` (a head on the large model's hidden
states of its large_direct pass) and `lora-probe` (the small VLM + LoRA reading image and question; its own pass
charged on the labels' clock, training/probe/cost.py). The script checks the three test splits hold the same sample
ids, then prints per strategy AUROC and Brier (and the base-rate Brier: a constant at the training rows' accuracy), and
each router's certified choice on those rows (accuracy, mean latency, speed-up vs large_reason).

Run: OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_probes_same_rows.py [--epochs 3] [--out runs/bench-probes]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

TYPES = ("lightgbm", "self-probe", "lora-probe")


def train(kind: str, labels, meta, args):
    from routedvlm.training.config import TrainConfig
    from routedvlm.training.pipeline import train_router

    cfg = TrainConfig(router=kind, mode="cascade", delta=args.delta, no_mlflow=True, seed=args.seed,
                      output_dir=str(args.out / kind), epochs=args.epochs, allow_constant_features=True)
    t0 = time.perf_counter()
    result = train_router(cfg, labels, meta)
    return result, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--delta", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0, help="train-router --seed (the split), the same for all three")
    ap.add_argument("--epochs", type=int, default=3, help="lora-probe --epochs")
    ap.add_argument("--out", type=Path, default=Path("runs/bench-probes"))
    args = ap.parse_args()

    from routedvlm.training.labels_io import load_labels

    labels, meta = load_labels(None)
    results, seconds = {}, {}
    for kind in TYPES:
        results[kind], seconds[kind] = train(kind, labels, meta, args)
    ids = {k: sorted(map(str, r.test["sample_id"])) for k, r in results.items()}
    same = all(v == ids[TYPES[0]] for v in ids.values())
    if not same:
        raise SystemExit("the three routers' test rows differ: not a same-rows comparison")
    n = len(ids[TYPES[0]])
    strategies = [s for s in results["lightgbm"].evaluation["probabilities"]]
    print(f"same {n} test rows for {', '.join(TYPES)} (train-router split seed {args.seed}; cascade; target default, "
          f"delta {args.delta})\n")
    print("| strategy | accuracy | " + " | ".join(f"AUROC {k}" for k in TYPES) + " | "
          + " | ".join(f"Brier {k}" for k in TYPES) + " | Brier base rate |")
    print("|---|---|" + "---|" * (2 * len(TYPES) + 1))
    table = {}
    for s in strategies:
        q = {k: results[k].evaluation["probabilities"].get(s, {}) for k in TYPES}
        table[s] = q
        au = " | ".join("n/a" if q[k].get("auroc") is None else f"{q[k]['auroc']:.3f}" for k in TYPES)
        br = " | ".join(f"{q[k].get('brier', float('nan')):.4f}" for k in TYPES)
        print(f"| {s} | {q['lightgbm']['accuracy']:.3f} | {au} | {br} | {q['lightgbm']['brier_base_rate']:.4f} |")
    print("\ncertified choice on the same test rows:")
    chosen = {}
    for k in TYPES:
        ev = results[k].evaluation
        row = ev["rows"][-1]
        cost = ev.get("probe", {}).get("cost_ms_mean")
        chosen[k] = {"rule": row["name"], "accuracy": row["accuracy"], "mean_latency_ms": row["mean_latency_ms"],
                     "speedup": row["speedup_vs_large_reason"], "target_met": row["target_met"], "probe_cost_ms": cost,
                     "clock": ev.get("probe", {}).get("clock"), "train_seconds": seconds[k]}
        extra = f"; probe charged {cost:.1f} ms/request" if cost is not None else ""
        print(f"  {k:<11} {row['name']}: {row['accuracy']:.3f} at {row['mean_latency_ms']:.1f} ms "
              f"({row['speedup_vs_large_reason'] or float('nan'):.2f}x large_reason; target "
              f"{'met' if row['target_met'] else 'missed'}){extra}; train {seconds[k]:.0f} s")
    clock = chosen["lora-probe"]["clock"] or {}
    if clock.get("reference_stage"):
        print(f"\nlora-probe pass on the labels' clock: {clock['ratio']:.3f} x their {clock['reference_stage']} "
              f"({clock['reference_labels_ms']:.1f} ms) = {clock['own_charged_ms']:.1f} ms; timed here alone "
              f"{clock['own_ms_here']:.1f} ms beside {clock['reference_ms_here']:.1f} ms for the stage")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_probes_same_rows.json").write_text(
        json.dumps({"test_rows": n, "quality": table, "chosen": chosen}, indent=2, default=float) + "\n")
    print(f"\nwrote {args.out / 'bench_probes_same_rows.json'}")


if __name__ == "__main__":
    main()
