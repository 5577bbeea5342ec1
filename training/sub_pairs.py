"""The ladder against its pairs: for every two models a < b of a ladder, the best policy a router can reach on that
pair's strategies alone, trained, certified and evaluated like the ladder's, for the evaluation table.

Each sub-pair router is a LightGBM router (lightgbm/pairs.py) on the candidates that run only `a` and `b`, in the pair's shape: one-shot
reads the prompt features; a cascade pays `b_direct` (the pair's top, as a pair's cascade pays `large_direct`) and
reads the prompt and `b_direct` features. It is certified on the same calibration rows at the same target and
against the same reference strategy as the ladder policy (so "the same certified target" means the same promise;
a pair that cannot reach it is reported infeasible), and scored on the same test rows. These certificates are shown
for comparison only: nothing is chosen among them, so the ladder policy's certificate (and the level after selection
that DESIGN "The level that holds" requires) is unchanged; picking a pair over the ladder from this table would be a
selection among routers on the same calibration rows, at the union-bound price of each δ.
"""
from __future__ import annotations

import itertools
import logging

import numpy as np
import pandas as pd

from routedvlm.router.strategies import feature_stages, parse_strategy

log = logging.getLogger(__name__)


def pair_candidates(candidates, a: str, b: str) -> list[str]:
    """The candidates that run only models `a` and `b`."""
    return [s for s in candidates if set(parse_strategy(s).models) <= {a, b}]


def pair_features(train: pd.DataFrame, mode: str, b: str) -> list[str]:
    """The pair's features: the prompt's (one-shot) plus `b_direct`'s (cascade), non-constant on the training rows."""
    allowed = {"prompt"} if mode == "one-shot" else {"prompt", f"{b}_direct"}
    cols = [c for c in train.columns if c.startswith("feat__") and set(feature_stages(c)) <= allowed]
    return [c for c in cols if pd.to_numeric(train[c], errors="coerce").nunique(dropna=True) > 1
            and np.isfinite(pd.to_numeric(train[c], errors="coerce")).all()]


def sub_pair_rows(config, split, candidates, reference: str, ladder, labels_hash: str, ref_ms) -> list[dict]:
    """One evaluation row per sub-pair of `ladder` that has at least two candidates (module docstring): the certified
    policy of that pair on the test rows (`kind` 'pair', `pair` [a, b], `feasible`, `certificate`)."""
    if len(ladder) < 3:
        return []
    rows = []
    for a, b in itertools.combinations(ladder, 2):
        cands = pair_candidates(candidates, a, b)
        feats = pair_features(split.train, config.mode, b)
        if len(cands) < 2 or not feats:
            continue
        rows.append(_pair_row(config, split, cands, feats, (a, b), reference, labels_hash, ref_ms))
    return rows


def _pair_row(config, split, cands, feats, pair, reference, labels_hash, ref_ms) -> dict:
    from .calibration.certify import apply_to_policy, certify
    from .calibration.rule_family import Scorer
    from .evaluate import summarize
    from .lightgbm.pairs import fit_pair_router

    a, b = pair
    train = split.train
    paid = [] if config.mode == "one-shot" else [f"{b}_direct"]
    top_reason = f"{b}_reason"  # the pair's fallback: its top model reasoning (large_reason on the pair)
    fallback = top_reason if top_reason in cands else max(cands, key=lambda s: float(train[f"correct__{s}"].mean()))
    router = fit_pair_router(config, train, cands, feats, paid, fallback, labels_hash, (a, b))
    cal = certify(router, split.calibration, split.train, config.target, config.delta, reference=reference)
    apply_to_policy(router.policy, cal)
    correct, latency, chosen = Scorer(router, split.test).score(cal.chosen.member)
    state = cal.chosen.member.name if cal.feasible else f"infeasible, {cal.chosen.member.name}"
    log.info("sub-pair %s/%s: %s", a, b, cal.statement())
    return summarize(f"best pair {a}/{b}: {state}", "pair", correct, latency, chosen, ref_ms, pair=[a, b],
                     rule=cal.chosen.member.rule, feasible=bool(cal.feasible), certificate=cal.certificate())
