"""One routing decision with a LightGBM cascade router: LightGBM's single-row fast path against one `Booster.predict`
call and against the whole decision as it was (one `Booster.predict` per strategy), side by side in one run.

The router is trained by the shipped trainer's defaults (`training.fit.fit_models`: trees of 15 leaves, each strategy's
rounds chosen by 5-fold cross-validation up to 200; `--no-cv`: all 200 rounds, the largest default model) on the first 700
rows of the bundled toy-world labels (prompt + large_direct features, every strategy); the timed rows are the other
300, which the trees never saw. Before timing, every one of the 1,000 rows is checked: the fast path's P(correct)
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
    fast_router = LightGBMRouter(policy, boosters)
    saved = fast._API.get("fns")
    fast._API["fns"] = None  # the path before the fast one: Booster.predict per strategy
    try:
        slow_router = LightGBMRouter(policy, boosters)
    finally:
        fast._API["fns"] = saved
    assert fast_router._fast is not None and slow_router._fast is None
    return df, features, fast_router, slow_router


def _trees(booster) -> int:
    return booster.best_iteration if booster.best_iteration > 0 else booster.num_trees()


def timed(fn, rows, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        for row in rows:
            t0 = time.perf_counter()
            fn(row)
            out.append((time.perf_counter() - t0) * 1e6)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--no-cv", action="store_true", help="train all 200 rounds (no cross-validated early stopping)")
    args = ap.parse_args(argv)
    df, features, fast_router, slow_router = router_pair(0 if args.no_cv else 5)
    records = df[features].to_dict(orient="records")
    worst = 0.0
    for row in records:
        a, b = fast_router._proba_row(row), slow_router._proba_row(row)
        worst = max(worst, max(abs(a[s] - b[s]) for s in a))
        assert fast_router.decide(row) == slow_router.decide(row)
    print(f"identical: {len(records)} rows, max |fast - Booster.predict| = {worst:.1e}, same decisions")
    held = records[700:]
    booster = max(fast_router.boosters.values(), key=lambda b: _trees(b))
    x = [np.array([[row[f] for f in features]], dtype=float) for row in held]
    results = {
        "one Booster.predict (1 row, 1 strategy)": timed(lambda r: booster.predict(r, num_threads=1), x, args.repeats),
        "decide(), Booster.predict per strategy": timed(slow_router.decide, held, args.repeats),
        "decide(), fast path": timed(fast_router.decide, held, args.repeats),
        "P(correct) only, fast path": timed(fast_router._proba_row, held, args.repeats),
    }
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
