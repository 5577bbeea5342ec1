"""Does the small VLM's own state (`feat__small_direct__state_<i>`, issue 37) lift the toy world's certified router?

Side by side in one run, train-router at its defaults (LightGBM, cascade, default target and delta) on the bundled toy
labels (data/toyworld/labels.parquet, state features added by `routedvlm labels add-features`), three feature sets:
- `default`: what train-router picks (prompt + large_direct features; small_direct is not paid);
- `+small_direct`: also the small model's logprob / agreement features (the policy pays small_direct);
- `+small_direct+state`: also the 16 state features (same paid stages as `+small_direct`, so any gain is the state's).
Evaluated on fresh toy eval labels from a seed no other run uses (labelled here, then the state features added):
realised accuracy and mean latency of each certified choice vs `large_reason` (speed-up x), and AUROC per strategy on
train-router's own test rows and on the fresh eval rows.

Run: OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_state_features.py [--eval-n 200] [--eval-seed 60613]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
EVAL_SEED = 60613  # never used by another run of this project (grep the repository)
STATE = "feat__small_direct__state_"


def _auroc(p, y):
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, p)) if 0 < np.mean(y) < 1 else float("nan")


def prepare(out: Path, eval_n: int, eval_seed: int) -> tuple[Path, Path, dict]:
    """(train labels with state, eval labels with state, seconds per step); cached under `out`."""
    from routedvlm.data.labels.add_features import add_state_features
    from routedvlm.data.toyworld.make_labels import make_labels, toyworld_dir

    seconds = {}
    train = out / "toy-labels-state.parquet"
    if not train.exists():
        t0 = time.perf_counter()
        add_state_features(toyworld_dir() / "labels.parquet", train)
        seconds["add_features_train"] = time.perf_counter() - t0
    plain, evals = out / f"toy-eval-{eval_seed}.parquet", out / f"toy-eval-{eval_seed}-state.parquet"
    if not evals.exists():
        t0 = time.perf_counter()
        make_labels(plain, split="eval", n=eval_n, seed=eval_seed, workdir=out / "data", progress=False)
        seconds["label_eval"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        add_state_features(plain, evals)
        seconds["add_features_eval"] = time.perf_counter() - t0
    return train, evals, seconds


def arms(columns) -> dict:
    from routedvlm.router.strategies import feature_stages

    feats = [c for c in columns if c.startswith("feat__")]
    def stages(c):
        return set(feature_stages(c))
    base = [c for c in feats if stages(c) <= {"prompt", "large_direct"}]
    small = [c for c in feats if stages(c) <= {"prompt", "large_direct", "small_direct"} and not c.startswith(STATE)]
    return {"default": base, "+small_direct": small, "+small_direct+state": small + [c for c in feats if c.startswith(STATE)]}


def run(train_path: Path, eval_path: Path, out: Path) -> dict:
    from bench_certified import _eval

    from routedvlm.data.labels.schema import read_labels
    from routedvlm.training.calibration.rule_family import with_agreement
    from routedvlm.training.config import TrainConfig
    from routedvlm.training.pipeline import train_router

    labels, meta = read_labels(train_path)
    eval_df = with_agreement(read_labels(eval_path)[0])
    lr_acc, lr_ms = float(eval_df["correct__large_reason"].mean()), float(eval_df["latency_ms__large_reason"].mean())
    res = {"eval_rows": len(eval_df), "large_reason": [lr_acc, lr_ms], "arms": {}}
    plan = arms(labels.columns)
    for name, feats in plan.items():
        feats = None if name == "default" else feats  # train-router's own default choice (checked below)
        cfg = TrainConfig(no_mlflow=True, output_dir=str(out / name.strip("+").replace("+", "-")), features=feats,
                          allow_constant_features=True)
        t0 = time.perf_counter()
        r = train_router(cfg, labels.copy(), dict(meta))
        p = r.router.policy
        if name == "default":
            assert set(p.features) <= set(plan["default"]), "the default arm must not read small_direct"
        acc, ms = _eval(r.router, eval_df)
        probs = r.router.predict_proba(eval_df[list(p.features)])
        eval_auc = {s: _auroc(probs[s].to_numpy(), eval_df[f"correct__{s}"].to_numpy(int)) for s in p.strategies}
        cert = p.certificate
        goal = (float(eval_df[f"correct__{cert['reference']}"].mean()) - cert["bound"]
                if "reference" in str(cert.get("bound_meaning")) else cert.get("bound") or 0.0)
        res["arms"][name] = {
            "features": len(p.features), "paid_stages": list(p.paid_stages), "rule": p.certificate.get("chosen"),
            "certified": cert.get("certified"), "eval_accuracy": acc, "eval_mean_ms": ms, "eval_goal": goal,
            "speedup_vs_large_reason": lr_ms / ms, "meets_target_eval": bool(acc >= goal - 1e-12),
            "test_auroc": {s: v.get("auroc") for s, v in r.evaluation["probabilities"].items()},
            "eval_auroc": eval_auc, "state_params": bool(p.params.get("state")), "train_s": time.perf_counter() - t0}
    return res


def report(res: dict) -> None:
    lr_acc, lr_ms = res["large_reason"]
    print(f"fresh toy eval rows {res['eval_rows']}; large_reason {lr_acc:.3f} at {lr_ms:.1f} ms")
    print(f"{'arm':<22}{'feats':>6} {'paid':<28}{'eval acc':>9}{'goal':>7}{'mean ms':>9}{'speed-up':>9}  rule")
    for name, a in res["arms"].items():
        print(f"{name:<22}{a['features']:>6} {'+'.join(a['paid_stages']):<28}{a['eval_accuracy']:>9.3f}"
              f"{a['eval_goal']:>7.3f}{a['eval_mean_ms']:>9.1f}{a['speedup_vs_large_reason']:>8.2f}x  {a['rule']}"
              f"{'' if a['meets_target_eval'] else '  (target missed on eval)'}")
    strategies = list(next(iter(res["arms"].values()))["test_auroc"])
    for key in ("test_auroc", "eval_auroc"):
        print(f"AUROC per strategy ({'train-router test rows' if key == 'test_auroc' else 'fresh eval rows'}):")
        print(f"  {'strategy':<16}" + "".join(f"{n:>22}" for n in res["arms"]))
        for s in strategies:
            vals = [res["arms"][n][key].get(s) for n in res["arms"]]
            print(f"  {s:<16}" + "".join(f"{v:>22.3f}" if v is not None else f"{'-':>22}" for v in vals))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/bench-state", help="working folder (labels are cached here)")
    ap.add_argument("--eval-n", type=int, default=200, help="fresh toy eval samples (default 200)")
    ap.add_argument("--eval-seed", type=int, default=EVAL_SEED, help=f"their seed (default {EVAL_SEED})")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    train, evals, seconds = prepare(out, args.eval_n, args.eval_seed)
    for k, v in seconds.items():
        print(f"{k}: {v:.1f} s")
    res = run(train, evals, out)
    report(res)
    (out / "result.json").write_text(json.dumps({**res, "seconds": seconds}, indent=1, default=str))


if __name__ == "__main__":
    main()
