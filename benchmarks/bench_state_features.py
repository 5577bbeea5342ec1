"""Does the small VLM's own state (`feat__small_direct__state_<i>`, issue 37) lift the toy world's certified router?

Side by side in one run, train-router at its defaults (LightGBM, cascade, default target and delta) on the bundled toy
labels (data/toyworld/labels.parquet, state features added by `routedvlm labels add-features`), three feature sets:
- `default`: what train-router picks (prompt + large_direct features; small_direct is not paid);
- `+small_direct`: also the small model's logprob / agreement features (the policy pays small_direct);
- `+small_direct+state`: also the 16 state features (same paid stages as `+small_direct`, so any gain is the state's).
Evaluated on fresh toy eval labels from a seed no other run uses (labelled here, then the state features added):
realised accuracy and mean latency of each certified choice vs `large_reason` (speed-up x); the same router's best
speed-up at equal accuracy with hindsight (the cheapest member of its tau / lagrangian / binary chains reaching
large_reason - 2 points, and large_reason - the certified bound, on the eval rows: what its scores allow, calibration
luck taken out); and AUROC per strategy on train-router's own test rows and on the fresh eval rows.

Run: OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_state_features.py [--eval-n 200] [--eval-seeds 60613 60617]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
EVAL_SEEDS = (60613, 60617)  # used by no other run of this project (grep the repository)
STATE = "feat__small_direct__state_"


def _auroc(p, y):
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, p)) if 0 < np.mean(y) < 1 else float("nan")


def prepare(out: Path, eval_n: int, seeds) -> tuple[Path, dict, dict]:
    """(train labels with state, {seed: eval labels with state}, seconds per step); cached under `out`."""
    from routedvlm.data.labels.add_features import add_state_features
    from routedvlm.data.toyworld.make_labels import make_labels, toyworld_dir

    seconds = {}
    train = out / "toy-labels-state.parquet"
    if not train.exists():
        t0 = time.perf_counter()
        add_state_features(toyworld_dir() / "labels.parquet", train)
        seconds["add_features_train"] = time.perf_counter() - t0
    evals = {}
    for seed in seeds:
        plain, evals[seed] = out / f"toy-eval-{seed}-n{eval_n}.parquet", out / f"toy-eval-{seed}-n{eval_n}-state.parquet"
        if not evals[seed].exists():
            t0 = time.perf_counter()
            make_labels(plain, split="eval", n=eval_n, seed=seed, workdir=out / "data", progress=True)
            seconds[f"label_eval_{seed}"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            add_state_features(plain, evals[seed])
            seconds[f"add_features_eval_{seed}"] = time.perf_counter() - t0
    return train, evals, seconds


def arms(columns) -> dict:
    """Feature lists of the three arms (the default arm's is what train-router must pick by itself)."""
    from routedvlm.router.strategies import feature_stages

    feats = [c for c in columns if c.startswith("feat__")]
    base = [c for c in feats if set(feature_stages(c)) <= {"prompt", "large_direct"}]
    small = [c for c in feats if set(feature_stages(c)) <= {"prompt", "large_direct", "small_direct"}
             and not c.startswith(STATE)]
    return {"default": base, "+small_direct": small, "+small_direct+state": small + [c for c in feats if c.startswith(STATE)]}


def hindsight_ms(router, df, accuracy: float):
    """The least mean latency on `df` of any member of the router's rule chains (tau, lagrangian, binary) reaching
    `accuracy` on `df` itself: the router's scores at equal accuracy, with calibration luck taken out."""
    from bench_certified import cheapest_at

    found = [b[0] for chain in ("tau", "lagrangian", "binary") if (b := cheapest_at(router, df, chain, accuracy))]
    return min(found) if found else None


def evaluate(router, df) -> dict:
    from bench_certified import _eval

    p, cert = router.policy, router.policy.certificate
    lr_acc, lr_ms = float(df["correct__large_reason"].mean()), float(df["latency_ms__large_reason"].mean())
    acc, ms = _eval(router, df)
    relative = cert.get("reference") and cert.get("loss_kind") != "error"
    goal = float(df[f"correct__{cert['reference']}"].mean()) - cert["bound"] if relative else cert.get("bound") or 0.0
    probs = router.predict_proba(df[list(p.features)])
    at = {f"-{gap:g}": hindsight_ms(router, df, lr_acc - gap) for gap in (0.02, round(float(cert["bound"]), 4))}
    return {"rows": len(df), "large_reason": [lr_acc, lr_ms], "accuracy": acc, "mean_ms": ms, "goal": goal,
            "meets_target": bool(acc >= goal - 1e-12), "speedup": lr_ms / ms,
            "hindsight_speedup": {k: (lr_ms / v if v else None) for k, v in at.items()},
            "auroc": {s: _auroc(probs[s].to_numpy(), df[f"correct__{s}"].to_numpy(int)) for s in p.strategies}}


def run(train_path: Path, eval_paths: dict, out: Path) -> dict:
    import pandas as pd

    from routedvlm.data.labels.schema import read_labels
    from routedvlm.training.calibration.rule_family import with_agreement
    from routedvlm.training.config import TrainConfig
    from routedvlm.training.pipeline import train_router

    labels, meta = read_labels(train_path)
    evals = {str(k): with_agreement(read_labels(v)[0]) for k, v in eval_paths.items()}
    if len(evals) > 1:
        evals["pooled"] = pd.concat(list(evals.values()), ignore_index=True)
    res = {}
    for name, feats in arms(labels.columns).items():
        cfg = TrainConfig(no_mlflow=True, output_dir=str(out / name.strip("+").replace("+", "-")),
                          features=None if name == "default" else feats, allow_constant_features=True)
        t0 = time.perf_counter()
        r = train_router(cfg, labels.copy(), dict(meta))
        p = r.router.policy
        if name == "default":
            assert set(p.features) <= set(feats), "train-router's default cascade must not read small_direct"
        res[name] = {"features": len(p.features), "paid_stages": list(p.paid_stages), "rule": p.certificate["chosen"],
                     "certified": p.certificate["certified"], "state_params": bool(p.params.get("state")),
                     "train_s": time.perf_counter() - t0,
                     "test_auroc": {s: v.get("auroc") for s, v in r.evaluation["probabilities"].items()},
                     "eval": {k: evaluate(r.router, df) for k, df in evals.items()}}
    return res


def report(res: dict) -> None:
    first = next(iter(res.values()))
    for key, e in first["eval"].items():
        lr_acc, lr_ms = e["large_reason"]
        gaps = list(e["hindsight_speedup"])
        print(f"\nfresh toy eval {key} ({e['rows']} rows): large_reason {lr_acc:.3f} at {lr_ms:.1f} ms; certified "
              f"goal {e['goal']:.3f}")
        print(f"  {'arm':<22}{'feats':>6} {'paid':<27}{'acc':>7}{'ms':>8}{'speed-up':>9}"
              + "".join(f"{'hindsight@' + g:>19}" for g in gaps) + "  certified rule")
        for name, a in res.items():
            v = a["eval"][key]
            hs = "".join(f"{(f'{x:.2f}x' if x else 'never'):>19}" for x in v["hindsight_speedup"].values())
            print(f"  {name:<22}{a['features']:>6} {'+'.join(a['paid_stages']):<27}{v['accuracy']:>7.3f}"
                  f"{v['mean_ms']:>8.1f}{v['speedup']:>8.2f}x{hs}  {a['rule']}"
                  + ("" if v["meets_target"] else "  (target missed here)"))
    last = list(first["eval"])[-1]
    for title, get in (("train-router's test rows", lambda a: a["test_auroc"]),
                       (f"fresh eval rows, {last}", lambda a: a["eval"][last]["auroc"])):
        print(f"\nAUROC per strategy ({title}):")
        print(f"  {'strategy':<16}" + "".join(f"{n:>22}" for n in res))
        for s in first["test_auroc"]:
            print(f"  {s:<16}" + "".join(f"{get(res[n]).get(s):>22.3f}" for n in res))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/bench-state", help="working folder (labels are cached here)")
    ap.add_argument("--eval-n", type=int, default=200, help="fresh toy eval samples (default 200)")
    ap.add_argument("--eval-seeds", type=int, nargs="+", default=list(EVAL_SEEDS),
                    help=f"their seeds (default {' '.join(map(str, EVAL_SEEDS))})")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    train, evals, seconds = prepare(out, args.eval_n, args.eval_seeds)
    for k, v in seconds.items():
        print(f"{k}: {v:.1f} s")
    res = run(train, evals, out)
    report(res)
    (out / "result.json").write_text(json.dumps({**res, "seconds": seconds}, indent=1, default=str))


if __name__ == "__main__":
    main()
