"""`--calib-fraction auto`: choose the calibration share from the training rows alone (docs/training.md,
"Choosing the calibration share").

The split (split.py) lays every dataset's rows out in one seeded order: test rows first, then calibration rows, then
training rows. For every candidate share s <= the largest, the rows after the largest calibration slice are training
rows whatever s is chosen: the *choice rows*. Only they are read. On them, `repeats` inner splits (inner test share
= --test-fraction; the rest divided between inner training and inner calibration in the outer proportion s / (1 -
test share)) fit the type's router and certify it exactly as train-router does; the share whose certified rule has
the least mean latency on the inner test rows wins (ties: the smaller share). The outer split then uses that share.

Why the certificate stays valid: the share, like the features and the mode, is a function of the choice rows only,
which are never calibration (or test) rows; the calibration rows are drawn by the seeded order independently of
them, so given the choice they are still i.i.d. draws of the traffic, which is all Learn-then-Test needs.

The simulation (`simulate_share`) fits the router of the type whose share it chooses, with that type's fit function
(LightGBM's `fit_router`, knn's `fit_knn`: the types whose registry entries declare `chooses_share`); every other type
takes the default share.
"""
from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
import pandas as pd

from routedvlm.errors import TrainingError

from .split import split_labels

log = logging.getLogger(__name__)

AUTO = "auto"
CANDIDATE_SHARES = (0.2, 0.3, 0.4)
DEFAULT_SHARE = 0.2  # what auto falls back to when it cannot choose (and the fixed default)
REPEATS = 3  # inner splits per candidate share
MIN_TRAIN_SHARE = 0.2  # a candidate must leave at least this share of the rows for training


def candidate_shares(test_fraction: float) -> list[float]:
    return [s for s in CANDIDATE_SHARES if 1.0 - test_fraction - s >= MIN_TRAIN_SHARE - 1e-9] or [DEFAULT_SHARE]


def choice_rows(labels: pd.DataFrame, test_fraction: float, seed: int) -> pd.DataFrame:
    """The rows that are training rows under every candidate share (the only rows the choice reads)."""
    return split_labels(labels, max(candidate_shares(test_fraction)), test_fraction, seed).train


def settle(config, why: str, share: float = DEFAULT_SHARE, scores: dict | None = None) -> float:
    """Set `config.calib_fraction` to `share` and record why (`config.calib_choice`, `config.calib_scores`)."""
    config.calib_fraction = float(share)
    config.calib_choice = why
    config.calib_scores = scores or {}
    log.info("calibration share: %s", why)
    return config.calib_fraction


def given(config) -> None:
    """Record a share the user gave (or the default) the same way an automatic choice is recorded."""
    if config.calib_fraction != AUTO and not getattr(config, "calib_choice", None):
        config.calib_choice = f"{config.calib_fraction:g} (given)"
        config.calib_scores = {}


def simulate_share(config, labels: pd.DataFrame, candidates, features, paid, labels_hash: str, fit,
                   repeats: int = REPEATS) -> float:
    """Settle `config.calib_fraction` 'auto' by simulating train-router on the choice rows (the module docstring):
    `fit(config, split, candidates, features, paid, labels_hash)` is the type's router fit; returns the share."""
    from routedvlm.training.calibration.certify import certify
    from routedvlm.training.calibration.rule_family import Scorer

    if config.calib_fraction != AUTO:
        given(config)
        return config.calib_fraction
    if config.target["kind"] == "latency_ms":
        return settle(config, f"{DEFAULT_SHARE:g} (auto: a latency budget is not certified; the share buys nothing)")
    shares = candidate_shares(config.test_fraction)
    if len(shares) == 1:
        return settle(config, f"{shares[0]:g} (auto: --test-fraction {config.test_fraction:g} leaves room for no "
                              "larger share)", shares[0])
    rows = choice_rows(labels, config.test_fraction, config.seed)
    inner_cfg = replace(config, calib_fraction=DEFAULT_SHARE, no_mlflow=True)
    scores: dict[str, list[float]] = {f"{s:g}": [] for s in shares}
    try:
        for r in range(repeats):
            for s in shares:
                split = split_labels(rows, s, config.test_fraction, seed=config.seed * 1000 + 7 + r)
                router = fit(inner_cfg, split, candidates, features, paid, labels_hash)
                cal = certify(router, split.calibration, split.train, config.target, config.delta,
                              chains=getattr(config, "chains", None))
                _, latency, _ = Scorer(router, split.test).score(cal.chosen.member)
                scores[f"{s:g}"].append(float(latency.mean()))
    except TrainingError as exc:
        return settle(config, f"{DEFAULT_SHARE:g} (auto: the {len(rows)} choice rows are too few to simulate the "
                              f"split: {exc})")
    means = {k: float(np.mean(v)) for k, v in scores.items()}
    best = min(means, key=lambda k: (means[k], float(k)))
    table = ", ".join(f"{k}: {v:.1f} ms" for k, v in means.items())
    return settle(config, f"{best} (auto: least mean latency of the certified rule on inner test rows, {repeats} "
                          f"inner splits of the {len(rows)} rows that train under every candidate share; {table})",
                  float(best), means)
