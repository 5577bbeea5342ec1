"""One routing decision with a LightGBM cascade router: the shipped path (every strategy's booster merged into one
LightGBM model, one single-row fast call, router/lightgbm/merged.py) against one `Booster.predict` call, against one
fast call per booster (the previous path) and against one `Booster.predict` per strategy, side by side in one run.

The router is trained by the shipped trainer's defaults (`training.fit.fit_models`: trees of 15 leaves, each strategy's
rounds chosen by 5-fold cross-validation up to 200; `--no-cv`: all 200 rounds, the largest default model) on the first 700
rows of the bundled toy-world labels (prompt + large_direct features, every strategy); the timed rows are the other
300, which the trees never saw. Before timing, every one of the 1,000 rows is checked: each fast path's P(correct)
equals `Booster.predict`'s within 1e-9 and the decisions are the same.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_decision.py [--repeats 20] [--no-cv]
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import pandas as pd

LABELS = Path(__file__).resolve().parents[1] / "data" / "toyworld" / "labels.parquet"


def router_pair(cv_folds: int):
    from routedvlm.router import LightGBMRouter, Policy
    from routedvlm.router.lightgbm import fast
    from routedvlm.training.fit import fit_models

    df = pd.read_parquet(LABELS)
    features = [c for c in df.columns if c.startswith(("feat__prompt__", "feat__large_direct__"))]
    strategies = ["large_direct", "transfer_4", "transfer_8", "transfer_16", "transfer_all", "large_reason"]
    boosters, constants = fit_models(df.iloc[:700], features, strategies, num_boost_round=200, cv_folds=cv_folds)
    costs = {s: 100.0 * i for i, s in enumerate(strategies)}
    policy = Policy(router_type="lightgbm", strategies=strategies, features=features, paid_stages=["large_direct"],
                    mode="cascade", fallback="large_reason", tau=0.8, expected_cost_ms=costs,
                    params={"constants": constants})
    merged_router = LightGBMRouter(policy, boosters)
    saved, merged_rows = fast._API.get("fns"), fast._merged_rows
    try:
        fast._merged_rows = lambda *a: None  # one fast call per booster (the previous path)
        per_booster_router = LightGBMRouter(policy, boosters)
        fast._API["fns"] = None  # the path before the fast one: Booster.predict per strategy
        slow_router = LightGBMRouter(policy, boosters)
    finally:
        fast._API["fns"], fast._merged_rows = saved, merged_rows
    assert isinstance(merged_router._fast, fast.MergedRows) and isinstance(per_booster_router._fast, fast.FastRows)
    assert slow_router._fast is None
    return df, features, merged_router, per_booster_router, slow_router


def _trees(booster) -> int:
    return booster.best_iteration if booster.best_iteration > 0 else booster.num_trees()


def timed(methods: dict, repeats: int) -> dict[str, list[float]]:
    """{name: microseconds per call}; `methods` maps a name to (fn, rows). The methods take turns every round, so a
    change of machine load falls on all of them alike."""
    out = {name: [] for name in methods}
    for _ in range(repeats):
        for name, (fn, rows) in methods.items():
            times = out[name]
            for row in rows:
                t0 = time.perf_counter()
                fn(row)
                times.append((time.perf_counter() - t0) * 1e6)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--no-cv", action="store_true", help="train all 200 rounds (no cross-validated early stopping)")
    args = ap.parse_args(argv)
    df, features, fast_router, per_booster, slow_router = router_pair(0 if args.no_cv else 5)
    records = df[features].to_dict(orient="records")
    worst = {"merged": 0.0, "per booster": 0.0}
    for row in records:
        want = slow_router._proba_row(row)
        for name, router in (("merged", fast_router), ("per booster", per_booster)):
            got = router._proba_row(row)
            worst[name] = max(worst[name], max(abs(got[s] - want[s]) for s in want))
            assert router.decide(row) == slow_router.decide(row)
    assert max(worst.values()) <= 1e-9, worst
    print(f"identical: {len(records)} rows, max |merged - Booster.predict| = {worst['merged']:.1e}, "
          f"max |per booster - Booster.predict| = {worst['per booster']:.1e}, same decisions")
    held = records[700:]
    booster = max(fast_router.boosters.values(), key=lambda b: _trees(b))
    x = [np.array([[row[f] for f in features]], dtype=float) for row in held]
    results = timed({
        "one Booster.predict (1 row, 1 strategy)": (lambda r: booster.predict(r, num_threads=1), x),
        "decide(), Booster.predict per strategy": (slow_router.decide, held),
        "decide(), one fast call per booster": (per_booster.decide, held),
        "decide(), merged: one fast call (shipped)": (fast_router.decide, held),
        "P(correct) only, merged": (fast_router._proba_row, held),
    }, args.repeats)
    base = statistics.median(results["one Booster.predict (1 row, 1 strategy)"])
    n_models = len(fast_router.boosters)
    print(f"{n_models} boosters ({sum(_trees(b) for b in fast_router.boosters.values())} trees used; the one-predict column uses the largest, {_trees(booster)}), "
          f"{len(features)} features, {len(held)} held-out rows x {args.repeats}")
    print(f"{'':42s} {'p50 us':>8s} {'p99 us':>8s} {'p50 / one predict':>18s}")
    for name, ts in results.items():
        p50, p99 = statistics.median(ts), float(np.percentile(ts, 99))
        print(f"{name:42s} {p50:8.1f} {p99:8.1f} {p50 / base:18.2f}")


if __name__ == "__main__":
    main()
