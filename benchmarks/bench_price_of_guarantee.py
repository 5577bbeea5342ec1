"""The price of the guarantee on RouteLLM's GSM8K outcome table (benchmarks/data/routellm_gsm8k_full.csv, all 1,319
prompts; Mixtral-8x7B = small_direct, GPT-4 = large_direct, imported as `routedvlm labels import-outcomes` does).

Over --splits random train / calibration / test splits (train-router's split, seeds 0..), at the default target
(accuracy >= 95 % of the strong model's: alpha = 0.05 x its training accuracy, delta = 0.1), one-shot:
- `certified`: train-router's defaults (LightGBM on the prompt features, the rule family, Learn-then-Test on the
  accuracy difference, betting p-value) -> strong-call savings (share of test prompts not sent to GPT-4), and the
  violation rate (test accuracy < test accuracy of GPT-4 - alpha; the test rows' own noise adds to it);
- `hindsight threshold`: the same router's tau chain, the threshold chosen on the test rows (the most savings whose
  test accuracy meets the target); `hindsight threshold, regret`: the same but holding the test regret <= alpha;
- `hindsight random`: random routing with the share sent to Mixtral chosen on the test rows to meet the target;
- the price of the guarantee = hindsight threshold - certified, split into the proxy's share (hindsight threshold -
  hindsight threshold under the regret; zero when the difference is certified) and the finite-sample share (the rest);
- `certified_auto`: the same with --calib-fraction auto (the share chosen among 0.2 / 0.3 / 0.4 on the rows that
  train under every one of them, training/share.py) against `certified` (the fixed default 0.2), same test rows;
- each piece of the certification path on its own: the regret proxy, the number of chains and the Bonferroni split,
  the family size (tau grid), the calibration share, the p-value (betting), a textbook chain (logistic regression on
  prompt length, one fixed-sequence chain, Clopper-Pearson at delta).

Run: OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_price_of_guarantee.py [--splits 50] [--out out.json]
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd

DATA = Path(__file__).resolve().parent / "data" / "routellm_gsm8k_full.csv"
DELTA, TARGET = 0.1, 0.95
STRONG, WEAK = "large_direct", "small_direct"


def load_labels() -> pd.DataFrame:
    from routedvlm.data.labels.outcomes import import_outcomes

    return import_outcomes(pd.read_csv(DATA), "routellm", dataset="gsm8k")


def fit(labels: pd.DataFrame, seed: int, calib: float = 0.2, test: float = 0.2, train_rows=None):
    """(router, split) of train-router's defaults (one-shot, LightGBM) on one random split."""
    from routedvlm.training.config import TrainConfig
    from routedvlm.training.lightgbm.trainer import fit_router
    from routedvlm.training.split import split_labels

    split = split_labels(labels, calib, test, seed)
    if train_rows is not None:  # the same train rows whatever the calibration share (the share's own effect)
        split.train = split.train.iloc[:train_rows]
    cfg = TrainConfig(no_mlflow=True, mode="one-shot", seed=seed)
    features = [c for c in labels.columns if c.startswith("feat__prompt__") and split.train[c].nunique() > 1]
    return fit_router(cfg, split, [WEAK, STRONG], features, [], "gsm8k"), split


def strong_share(scorer, member) -> tuple[float, float]:
    """(share of rows sent to the strong model, accuracy) of `member` on the scorer's rows."""
    correct, _, chosen = scorer.score(member)
    return float(np.mean(chosen == STRONG)), float(correct.mean())


def chain_pick(spec, scorer, members, level: float):
    """The least-latency certified member of one fixed-sequence chain at `level` (None when none is)."""
    from routedvlm.training.calibration import ltt

    losses, lat = [], []
    for m in members:
        correct, latency, _ = scorer.score(m)
        losses.append(spec.losses(scorer.df, correct))
        lat.append(latency.mean())
    p = spec.p_values(np.asarray(losses), level)
    ok = ltt.certified_prefix(p, level)
    return members[int(np.argmin(np.where(ok, lat, np.inf)))] if ok.any() else None


def hindsight(scorer, members, required: float, regret_limit: float | None = None) -> float:
    """The largest savings (1 - strong share) of a member of `members` meeting `required` accuracy on the scorer's
    rows (and, when given, test regret <= regret_limit)."""
    ref = scorer.df[f"correct__{STRONG}"].to_numpy(dtype=bool)
    best = 0.0
    for m in members:
        correct, _, chosen = scorer.score(m)
        if correct.mean() >= required - 1e-12 and (regret_limit is None or (ref & ~correct).mean() <= regret_limit):
            best = max(best, float(np.mean(chosen != STRONG)))
    return best


def textbook(split, spec, level: float, grid) -> float | None:
    """Logistic regression on the prompt's length (chars, words, digits) for P(Mixtral right); route to Mixtral
    when it is >= t, t along one fixed-sequence chain; the certified savings on the test rows."""
    from sklearn.linear_model import LogisticRegression
    from routedvlm.training.calibration import ltt

    cols = ["feat__prompt__question_chars", "feat__prompt__question_words", "feat__prompt__question_digits"]
    x = lambda df: np.log1p(df[cols].to_numpy(dtype=float))  # noqa: E731
    model = LogisticRegression().fit(x(split.train), split.train[f"correct__{WEAK}"].to_numpy(dtype=bool))

    def picks(df):
        return model.predict_proba(x(df))[:, 1][None, :] >= grid[:, None]  # [thresholds, rows]: True = Mixtral

    def outcome(df, weak):
        return np.where(weak, df[f"correct__{WEAK}"].to_numpy(bool)[None, :], df[f"correct__{STRONG}"].to_numpy(bool))

    cal, test = split.calibration, split.test
    weak_cal = picks(cal)
    ref = cal[f"correct__{STRONG}"].to_numpy(bool)[None, :]
    correct = outcome(cal, weak_cal)
    losses = (ref & ~correct).astype(np.int8) - ((~ref & correct).astype(np.int8) if spec.kind == "difference" else 0)
    ok = ltt.certified_prefix(spec.p_values(losses, level), level)
    if not ok.any():
        return 0.0
    j = int(np.argmax(np.where(ok, weak_cal.mean(axis=1), -1)))
    return float(picks(test)[j].mean())


def one_split(labels: pd.DataFrame, seed: int) -> dict:
    from routedvlm.training.calibration.certify import certify, risk_spec
    from routedvlm.training.calibration.rule_family import TAU_GRID, Scorer, model_chains

    router, split = fit(labels, seed)
    train, cal, test = split.train, split.calibration, split.test
    base = {"kind": "accuracy", "value": TARGET}
    spec = risk_spec(base, train, router.policy.strategies)
    assert spec.reference == STRONG
    p_cal = router.predict_proba(router._inputs(cal))
    p_test = router.predict_proba(router._inputs(test))
    s_cal, s_test = Scorer(router, cal, p_cal), Scorer(router, test, p_test)
    required = float(test[f"correct__{STRONG}"].mean()) - spec.alpha
    out = {"seed": seed, "alpha": spec.alpha, "n_cal": len(cal), "n_test": len(test)}

    def certified(target, key):
        cal_ = certify(router, cal, train, target, DELTA, proba=p_cal)
        share, acc = strong_share(s_test, cal_.chosen.member)
        out[key] = 1 - share
        out[key + "_violation"] = bool(acc < required - 1e-12)
        out[key + "_trivial"] = bool(cal_.trivial or not cal_.feasible)
        return cal_

    cal_ = certified(base, "certified")
    out["certified_chain"] = cal_.chosen.member.chain
    certified({**base, "loss": "regret"}, "certified_regret")
    certified({**base, "test": "clopper-pearson"}, "certified_clopper_pearson")
    certified({**base, "test": "betting"}, "certified_betting")
    tau = model_chains(router.policy, s_cal.strategies)["tau"]
    coarse = [m for m in tau if round(m.rule["param"] * 100) % 10 == 0]  # 21 thresholds
    regret_spec = risk_spec({**base, "loss": "regret"}, train, router.policy.strategies)
    n_chains = len(cal_.chains)
    out["chains"] = n_chains
    for key, sp, members, level in (("tau_only", spec, tau, DELTA), ("tau_only_regret", regret_spec, tau, DELTA),
                                    ("tau_bonferroni", spec, tau, DELTA / n_chains),
                                    ("tau_coarse", spec, coarse, DELTA)):
        m = chain_pick(sp, s_cal, members, level)
        out[key] = 0.0 if m is None else 1 - strong_share(s_test, m)[0]
    out["hindsight_threshold"] = hindsight(s_test, tau, required)
    out["hindsight_threshold_regret"] = hindsight(s_test, tau, required, spec.alpha)
    acc_s, acc_l = float(test[f"correct__{WEAK}"].mean()), float(test[f"correct__{STRONG}"].mean())
    out["hindsight_random"] = float(min(1.0, spec.alpha / max(acc_l - acc_s, 1e-9)))
    grid = np.asarray(TAU_GRID)
    cp_spec = risk_spec({**base, "test": "clopper-pearson"}, train, router.policy.strategies)
    out["textbook_difference"] = textbook(split, cp_spec, DELTA, grid)
    out["textbook_difference_betting"] = textbook(split, risk_spec({**base, "test": "betting"}, train,
                                                                   router.policy.strategies), DELTA, grid)
    out["textbook_regret"] = textbook(split, regret_spec, DELTA, grid)
    return out


def auto_share(labels: pd.DataFrame, seed: int) -> dict:
    """train-router's --calib-fraction auto on this split's seed: the share chosen on the rows that train under every
    candidate share (training/share.py), then fit + certify at it; savings and violation on the same test rows."""
    from routedvlm.training.calibration.certify import certify, risk_spec
    from routedvlm.training.calibration.rule_family import Scorer
    from routedvlm.training.config import TrainConfig
    from routedvlm.training.lightgbm.trainer import choose_share
    from routedvlm.training.share import choice_rows

    cfg = TrainConfig(no_mlflow=True, mode="one-shot", seed=seed, calib_fraction="auto")
    rows = choice_rows(labels, cfg.test_fraction, seed)
    features = [c for c in labels.columns if c.startswith("feat__prompt__") and rows[c].nunique() > 1]
    share = choose_share(cfg, labels, [WEAK, STRONG], features, [], "gsm8k")
    router, split = fit(labels, seed, calib=share)
    base = {"kind": "accuracy", "value": TARGET}
    cal_ = certify(router, split.calibration, split.train, base, DELTA)
    share_strong, acc = strong_share(Scorer(router, split.test), cal_.chosen.member)
    alpha = risk_spec(base, split.train, router.policy.strategies).alpha
    required = float(split.test[f"correct__{STRONG}"].mean()) - alpha
    return {"certified_auto": 1 - share_strong, "certified_auto_violation": bool(acc < required - 1e-12),
            "auto_share": share}


def share_sweep(labels: pd.DataFrame, seed: int, shares=(0.1, 0.2, 0.3, 0.4)) -> dict:
    """Certified savings (defaults) at several calibration shares, test share 0.2, train rows what is left."""
    from routedvlm.training.calibration.certify import certify
    from routedvlm.training.calibration.rule_family import Scorer

    out = {}
    for share in shares:
        router, split = fit(labels, seed, calib=share)
        cal_ = certify(router, split.calibration, split.train, {"kind": "accuracy", "value": TARGET}, DELTA)
        out[f"share_{share:g}"] = 1 - strong_share(Scorer(router, split.test), cal_.chosen.member)[0]
    return out


def summarize(rows: list[dict]) -> dict:
    df = pd.DataFrame(rows)
    num = df.select_dtypes(include=[np.number, bool])
    s = {k: float(num[k].mean()) for k in num.columns if k not in ("seed",)}
    s["price"] = s["hindsight_threshold"] - s["certified"]  # the difference certified: no proxy share
    s["price_proxy_share_old_default"] = s["hindsight_threshold"] - s["hindsight_threshold_regret"]
    s["price_finite_sample_share_old_default"] = s["hindsight_threshold_regret"] - s["certified_regret"]
    s["price_old_default"] = s["hindsight_threshold"] - s["certified_regret"]
    s["certified_beats_hindsight_random"] = float((df["certified"] > df["hindsight_random"]).mean())
    if "certified_auto" in df:
        s["auto_minus_default_share"] = s["certified_auto"] - s["certified"]
        s["auto_share_counts"] = {f"{k:g}": int(v) for k, v in df["auto_share"].value_counts().sort_index().items()}
    s["splits"] = len(df)
    return s


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--splits", type=int, default=50, help="random splits (seeds 0..splits-1)")
    ap.add_argument("--share-splits", type=int, default=20, help="splits of the calibration-share sweep (0: skip)")
    ap.add_argument("--auto", action=argparse.BooleanOptionalAction, default=True,
                    help="also run the --calib-fraction auto arm on every split (about 10 s a split)")
    ap.add_argument("--out", type=Path, default=None, help="write the per-split rows and the summary as JSON")
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)
    labels = load_labels()
    rows = [{**one_split(labels, seed), **(auto_share(labels, seed) if args.auto else {})} for seed in range(args.splits)]
    summary = summarize(rows)
    sweep = [share_sweep(labels, seed) for seed in range(args.share_splits)]
    if sweep:
        summary["calibration_share_sweep"] = {k: float(np.mean([r[k] for r in sweep])) for k in sweep[0]}
    print(json.dumps(summary, indent=2))
    if args.out:
        args.out.write_text(json.dumps({"summary": summary, "splits": rows, "share_sweep": sweep}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
