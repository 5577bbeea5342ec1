"""Fit one LightGBM binary model per candidate strategy: P(correct__s | features the mode allows).

Feature selection: `one-shot` uses `feat__prompt__*` only; `cascade` adds `feat__large_direct__*`, and the
features that need `small_direct` (incl. `feat__large_direct+small_direct__agree`) only when `--features`
names them (or `small_direct`) or `with_small_direct` is set. A strategy whose training labels are all
correct or all wrong gets a constant probability instead of a booster.

On a ladder (labels with a model beyond small and large) a cascade climbs: by default it reads the features of every
model's direct answer except the most expensive's (`small_direct`, `mid_direct`, ... paid cheapest first, then one
of them is accepted or the policy escalates); `--features` may name any `<m>_direct` stage instead (e.g.
`large_direct` for the pair's shape on a ladder).
"""
from __future__ import annotations

import fnmatch
import logging

import numpy as np
import pandas as pd

from routedvlm.errors import ConfigError, TrainingError
from routedvlm.router.strategies import (FEATURE_STAGES, LARGE_DIRECT, SMALL_DIRECT, alias_rank, feature_stages,
                                         is_feature_stage, parse_strategy)

log = logging.getLogger(__name__)


def _allowed(mode: str, stages) -> bool:
    """Whether features needing `stages` may be used in `mode` (cascade: any direct stage of a ladder)."""
    return set(stages) <= {"prompt"} if mode == "one-shot" else all(is_feature_stage(s) for s in stages)


def ladder_in(df: pd.DataFrame) -> tuple[str, ...]:
    """The model aliases the labels' strategies run, cheapest first (at least small and large)."""
    from .costs import label_strategies

    found = {a for s in label_strategies(df) for a in parse_strategy(s).models} | {"small", "large"}
    return tuple(sorted(found, key=alias_rank))


def feature_columns(df: pd.DataFrame) -> list[str]:
    return [c for c in df.columns if c.startswith("feat__")]


def _match(spec: str, columns: list[str]) -> list[str]:
    if spec in FEATURE_STAGES or is_feature_stage(spec):
        return [c for c in columns if spec in feature_stages(c)]
    if any(ch in spec for ch in "*?["):
        return [c for c in columns if fnmatch.fnmatchcase(c, spec)]
    return [spec] if spec in columns else []


def select_features(df: pd.DataFrame, mode: str, spec: list[str] | None = None, with_small_direct: bool = False) -> list[str]:
    """The feature columns a policy in `mode` uses, in file order (see the module docstring)."""
    columns = feature_columns(df)
    if spec:
        unknown = [s for s in spec if not _match(s, columns)]
        if unknown:
            raise ConfigError(
                f"`--features` items {unknown} match no feature column. Use column names, stage names "
                f"({', '.join(FEATURE_STAGES)}) or patterns; the labels have {columns}."
            )
        chosen = {c for s in spec for c in _match(s, columns)}
        bad = [c for c in sorted(chosen) if not _allowed(mode, feature_stages(c))]
        if bad:
            raise ConfigError(f"Mode {mode!r} may only use prompt features; `--features` selected {bad}. "
                              "Use --mode cascade to use stage features.")
    else:
        ladder = ladder_in(df)
        default = {"prompt"} if mode == "one-shot" else {"prompt", LARGE_DIRECT}
        if with_small_direct and mode == "cascade":
            default.add(SMALL_DIRECT)
        if mode == "cascade" and len(ladder) > 2:  # a ladder climbs: every direct answer below the top one
            default = {"prompt", *(f"{a}_direct" for a in ladder[:-1])}
        chosen = {c for c in columns if set(feature_stages(c)) <= default}
    selected = [c for c in columns if c in chosen]
    if not selected:
        raise TrainingError(f"No feature columns usable in mode {mode!r} (the labels have {columns}). "
                            "Relabel with features, or choose --mode/--features.")
    return selected


def paid_stages_for(features: list[str], mode: str, ladder=None) -> list[str]:
    """Stages run before deciding: [] (one-shot), [large_direct] or [large_direct, small_direct] (cascade on a pair);
    on a ladder (`ladder` of more than two aliases) the direct stages the features need, cheapest first."""
    if mode == "one-shot":
        return []
    if ladder is not None and len(ladder) > 2:
        from routedvlm.router.ladder import paid_order

        stages = {s for f in features for s in feature_stages(f) if s != "prompt"}
        return paid_order(stages or {LARGE_DIRECT}, ladder)
    needs_small = any(SMALL_DIRECT in feature_stages(f) for f in features)
    return [LARGE_DIRECT, SMALL_DIRECT] if needs_small else [LARGE_DIRECT]


def check_features(df: pd.DataFrame, features: list[str], allow_constant: bool = True,
                   allow_missing: bool = False, max_features: int | None = None, *,
                   train: pd.DataFrame | None = None) -> list[str]:
    """The usable features. TrainingError for more than `max_features` columns, for +-inf values (always: only NaN
    marks a missing value), for NaN (unless `allow_missing`: LightGBM then treats them as missing) and for
    constant columns (dropped with a warning naming them; refused unless `allow_constant`). Constant means constant on
    the `train` rows (default: all of `df`): calibration and test rows never change which features a router uses."""
    if max_features is not None and len(features) > max_features:
        raise TrainingError(f"{len(features)} feature columns selected (e.g. {features[:3]}); the sanity limit is "
                            f"{max_features} (--max-features). Choose the features with --features, or raise "
                            "--max-features if this many are intended (training time grows with them).")
    values = df[features].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=float)
    inf = {c: int(n) for c, n in zip(features, np.isinf(values).sum(axis=0)) if n}
    if inf:
        raise TrainingError(f"Feature columns with infinite values (rows affected, of {len(df)}): {_short(inf)}. "
                            "Only NaN marks a missing value, so --allow-missing-features does not apply; fix the "
                            "labeller's features or drop these columns with --features.")
    bad = {c: int(n) for c, n in zip(features, np.isnan(values).sum(axis=0)) if n}
    if bad and allow_missing:
        log.warning("feature columns with missing (NaN) values (rows, of %d): %s; LightGBM treats them as missing",
                    len(df), _short(bad))
    elif bad:
        raise TrainingError(f"Feature columns with NaN or non-numeric values (rows affected, of {len(df)}): "
                            f"{_short(bad)}. Fix the labeller's features, drop these columns with --features, or pass "
                            "--allow-missing-features.")
    rows = df if train is None else train
    frame = rows[features].apply(pd.to_numeric, errors="coerce")
    constant = [c for c in features if frame[c].nunique(dropna=True) <= 1]
    if constant and not allow_constant:
        raise TrainingError(f"Constant feature columns {constant} (on the {len(rows)} training rows) carry no "
                            "information, and --strict-features refuses them. Drop them with --features, or leave "
                            "out --strict-features to drop them with a warning.")
    kept = [c for c in features if c not in constant]
    if not kept:
        raise TrainingError(f"Every selected feature is constant ({constant}); nothing to learn from.")
    if constant:
        log.warning("dropping feature columns that are constant on the %d training rows: %s", len(rows), constant)
    return kept


def _short(counts: dict) -> str:
    items = list(counts.items())
    text = ", ".join(f"{c!r}: {n}" for c, n in items[:10])
    return "{" + text + (f", ... ({len(items)} columns)" if len(items) > 10 else "") + "}"


def lgb_params(num_leaves: int = 15, learning_rate: float = 0.05, seed: int = 0, num_threads: int = 1) -> dict:
    """Small, deterministic LightGBM parameters for a binary P(correct) model."""
    return {
        "objective": "binary", "num_leaves": num_leaves, "learning_rate": learning_rate,
        "min_data_in_leaf": 20, "lambda_l2": 1.0, "feature_fraction": 1.0, "bagging_fraction": 1.0,
        "num_threads": num_threads, "seed": seed, "deterministic": True, "force_row_wise": True,
        "verbosity": -1,
    }


def fit_models(train: pd.DataFrame, features: list[str], strategies: list[str], *, num_boost_round: int = 200,
               params: dict | None = None, cv_folds: int = 0) -> tuple[dict, dict[str, float]]:
    """Return (boosters by strategy, constant P(correct) by strategy for all-correct/all-wrong targets). With
    `cv_folds` >= 2 each booster's rounds (<= `num_boost_round`) are chosen by stratified k-fold cross-validation on
    `train` alone (early stopping on log loss, `cv_rounds`); the booster records them (`best_iteration`)."""
    import time

    import lightgbm as lgb

    params = params or lgb_params()
    x = train[features].to_numpy(dtype=float)
    boosters, constants = {}, {}
    t0 = time.perf_counter()
    for i, s in enumerate(strategies):
        if i:
            log.info("fitted %d/%d strategy models in %.1fs", i, len(strategies), time.perf_counter() - t0)
        y = train[f"correct__{s}"].to_numpy(dtype=bool).astype(float)
        if y.min() == y.max():
            constants[s] = float(y[0])
            log.info("strategy %s is %s on every training row; using a constant", s,
                     "correct" if y[0] else "wrong")
            continue
        rounds = cv_rounds(x, y, features, params, num_boost_round, cv_folds) if cv_folds >= 2 else num_boost_round
        data = lgb.Dataset(x, label=y, feature_name=list(features), free_raw_data=True,
                           params={"verbosity": -1})
        boosters[s] = lgb.train(params, data, num_boost_round=rounds)
    return boosters, constants


EARLY_STOPPING_ROUNDS = 20


def cv_rounds(x: np.ndarray, y: np.ndarray, features: list[str], params: dict, max_rounds: int, folds: int) -> int:
    """The boosting rounds with the least mean out-of-fold log loss over `folds` stratified folds of these (training)
    rows, stopping after EARLY_STOPPING_ROUNDS rounds without improvement; at least 1. A class with fewer rows than
    folds: the folds shrink to that count (at least 2), else `max_rounds`."""
    import lightgbm as lgb

    folds = min(folds, int(min(y.sum(), len(y) - y.sum())))
    if folds < 2:
        return max_rounds
    data = lgb.Dataset(x, label=y, feature_name=list(features), free_raw_data=False, params={"verbosity": -1})
    res = lgb.cv({**params, "metric": "binary_logloss"}, data, num_boost_round=max_rounds, nfold=folds,
                 stratified=True, seed=int(params.get("seed", 0)),
                 callbacks=[lgb.early_stopping(EARLY_STOPPING_ROUNDS, verbose=False)])
    return max(1, len(res["valid binary_logloss-mean"]))
