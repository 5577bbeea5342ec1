"""When can a small -> mid -> large ladder beat its best two-model pair? The hindsight bound, measured on ladder labels.

A router only picks among routes; no router, certified or not, can be faster at a target accuracy than the oracle
that knows every sample's outcomes and picks, per sample, the cheapest route of its policy class. So for each class
this computes the oracle's least mean latency at the target (exactly: per sample the cheapest route, plus, for the
cheapest set of samples that reaches the target, the extra cost of their cheapest correct route) and compares the
ladder's classes with the best pair's:
- one-shot: any single strategy of the models in the class (the ladder: all 3 models' strategies);
- cascade: the stages a policy pays before deciding, then accept a paid answer, continue a paid model's prefix
  (the escalate columns) or run another strategy; a pair pays `<large>_direct` (the product's cascade), the ladder
  climbs small_direct, then mid_direct (it may stop paying after any rung).
If the ladder's oracle is not 15 % faster than the best pair's oracle, no ladder policy can be (issue 41's goal);
when it is, the remaining gap is the router's. `--sweep` varies the mid model (its direct cost as a share of the
large's, its direct accuracy between the small's and the large's) in the synthetic generator to map where the
ladder's headroom is. Labels: `training/synthetic_ladder.py` (seed 5, 4000 rows, as bench_ladder_synthetic.py), or
`--labels` a ladder labels file (e.g. `bench_ladder.py`'s `runs/bench-ladder/labels-label.parquet`).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_ladder_value.py [--sweep] [--labels L.parquet]
"""
from __future__ import annotations

import argparse
import math

import numpy as np


def _strategies(df, models) -> list[str]:
    from routedvlm.router.strategies import parse_strategy

    out = []
    for c in df.columns:
        if c.startswith("correct__"):
            s = c[len("correct__"):]
            if set(parse_strategy(s).models) <= set(models):
                out.append(s)
    return out


def _routes(df, paid: list[str], allowed: list[str], climb: bool) -> list[tuple[np.ndarray, np.ndarray]]:
    """(cost, correct) arrays of every route of a cascade paying `paid` in order (each prefix when `climb`; the
    whole list when not), then accepting, continuing a paid model's prefix, or running a strategy of `allowed`."""
    from routedvlm.data.labels.schema import escalate_col
    from routedvlm.router.strategies import parse_strategy

    lat = lambda s: df[f"latency_ms__{s}"].to_numpy(float)  # noqa: E731
    ok = lambda s: df[f"correct__{s}"].to_numpy(bool)  # noqa: E731
    prefixes = [paid[:i] for i in range(1, len(paid) + 1)] if climb else [paid]
    routes = []
    for prefix in prefixes:
        base = sum(lat(s) for s in prefix)
        for s in allowed:
            st = parse_strategy(s)
            if s in prefix:
                routes.append((base, ok(s)))
            elif st.is_transfer and f"{st.model}_direct" in prefix and escalate_col(s) in df.columns:
                routes.append((base + df[escalate_col(s)].to_numpy(float), ok(s)))
            else:
                routes.append((base + lat(s), ok(s)))
    return routes


def oracle_ms(routes, target: float) -> float:
    """The least mean latency of a per-sample choice among `routes` with mean accuracy >= target (inf if none)."""
    cost = np.stack([c for c, _ in routes])
    ok = np.stack([k for _, k in routes])
    any_ms = cost.min(axis=0)
    ok_ms = np.where(ok, cost, np.inf).min(axis=0)
    n, need = len(any_ms), math.ceil(target * len(any_ms) - 1e-9)
    extra = np.sort(ok_ms - any_ms)[:need]
    return float((any_ms.sum() + extra.sum()) / n) if need == 0 or np.isfinite(extra[-1]) else math.inf


def classes(df, ladder=("small", "mid", "large")) -> dict:
    """{class name: routes}: one-shot and cascade for every pair and the ladder."""
    small, mid, large = ladder
    out = {}
    for a, b in ((small, mid), (small, large), (mid, large)):
        allowed = _strategies(df, (a, b))
        out[f"pair {a}/{b}, one-shot"] = [(df[f"latency_ms__{s}"].to_numpy(float), df[f"correct__{s}"].to_numpy(bool))
                                          for s in allowed]
        out[f"pair {a}/{b}, cascade (pays {b}_direct)"] = _routes(df, [f"{b}_direct"], allowed, climb=False)
    allowed = _strategies(df, ladder)
    out["ladder, one-shot"] = [(df[f"latency_ms__{s}"].to_numpy(float), df[f"correct__{s}"].to_numpy(bool))
                               for s in allowed]
    out[f"ladder, cascade (climbs {small}, {mid})"] = _routes(df, [f"{small}_direct", f"{mid}_direct"], allowed, True)
    out[f"ladder, cascade (pays {mid}_direct)"] = _routes(df, [f"{mid}_direct"], allowed, climb=False)
    return out


def compare(df, target: float) -> dict:
    ms = {name: oracle_ms(routes, target) for name, routes in classes(df).items()}
    pairs = {k: v for k, v in ms.items() if k.startswith("pair")}
    ladders = {k: v for k, v in ms.items() if k.startswith("ladder")}
    best_pair, best_ladder = min(pairs, key=pairs.get), min(ladders, key=ladders.get)
    return {"ms": ms, "best_pair": best_pair, "best_ladder": best_ladder,
            "ratio": ladders[best_ladder] / pairs[best_pair]}


def _labels(n: int, seed: int, mid_ms: float | None = None, mid_capacity: tuple | None = None):
    from routedvlm.training import synthetic_ladder as S

    saved = dict(S.DIRECT_MS), dict(S.DIRECT_CAPACITY)
    try:
        if mid_ms is not None:
            S.DIRECT_MS["mid"] = mid_ms
        if mid_capacity is not None:
            S.DIRECT_CAPACITY["mid"] = mid_capacity
        return S.make_ladder_labels(n, seed)
    finally:
        S.DIRECT_MS.clear(), S.DIRECT_MS.update(saved[0])
        S.DIRECT_CAPACITY.clear(), S.DIRECT_CAPACITY.update(saved[1])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--labels", help="a ladder labels file (default: synthetic, seed 5, 4000 rows)")
    ap.add_argument("--rows", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--target", type=float, default=0.95, help="accuracy target as a fraction of large_reason's")
    ap.add_argument("--sweep", action="store_true", help="also vary the mid model in the synthetic generator")
    args = ap.parse_args(argv)
    if args.labels:
        from routedvlm.data.labels.schema import failed_rows, read_labels

        df, _ = read_labels(args.labels)
        df = df.loc[~failed_rows(df)].reset_index(drop=True)
    else:
        df = _labels(args.rows, args.seed)
    target = args.target * float(df["correct__large_reason"].mean())
    for s in ("small_direct", "mid_direct", "large_direct", "large_reason"):
        print(f"{s:14s} accuracy {df[f'correct__{s}'].mean():.3f}  mean {df[f'latency_ms__{s}'].mean():7.1f} ms")
    mid_only = (df["correct__mid_direct"] & ~df["correct__small_direct"] & ~df["correct__large_direct"]).mean()
    print(f"mid_direct right where small_direct and large_direct are both wrong: {mid_only:.3f} of the samples")
    res = compare(df, target)
    print(f"\nhindsight (oracle) least mean latency at accuracy >= {target:.3f} ({args.target} x large_reason), "
          f"{len(df)} rows:")
    for name, v in sorted(res["ms"].items(), key=lambda kv: kv[1]):
        print(f"  {name:40s} {v:8.1f} ms")
    print(f"best ladder class / best pair class: {res['ratio']:.3f} ({res['best_ladder']} vs {res['best_pair']}); "
          f"a 15 % faster ladder policy needs <= 0.850")
    if not args.sweep:
        return
    from routedvlm.training import synthetic_ladder as S

    large_ms, (s_lo, s_re), (l_lo, l_re) = S.DIRECT_MS["large"], S.DIRECT_CAPACITY["small"], S.DIRECT_CAPACITY["large"]
    shares, mixes = (0.3, 0.55, 0.8), (0.0, 0.5, 0.9)
    print(f"\nsweep: best ladder / best pair oracle ratio at the same relative target; rows: mid_direct's cost as a share "
          f"of large_direct's ({large_ms:g} ms), columns: mid_direct's capacity from small's (0) to large's (1)")
    print("  cost share " + "".join(f"{m:>10.1f}" for m in mixes))
    for share in shares:
        cells = []
        for mix in mixes:
            cap = (s_lo + mix * (l_lo - s_lo), s_re + mix * (l_re - s_re))
            d = _labels(args.rows, args.seed, mid_ms=share * large_ms, mid_capacity=cap)
            cells.append(compare(d, args.target * float(d["correct__large_reason"].mean()))["ratio"])
        print(f"  {share:10.2f} " + "".join(f"{c:10.3f}" for c in cells))


if __name__ == "__main__":
    main()
