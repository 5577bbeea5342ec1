"""The `mf` router type's trainer (registered in `routedvlm.router.router_types`; no settings of its own, config.py): σ(<v_s, W·z> + b_s) fitted on the training rows by full-batch Adam on the mean log
loss over (row, strategy) pairs plus an L2 penalty; the rank and the penalty chosen by 3-fold cross-validation on the
training rows alone, then refitted on all of them; then the same certification and evaluation as every type
(steps.py). numpy only (no torch): the model is small and the fit deterministic given the seed.

Default features: the plan's (as LightGBM); `--features 'feat__prompt__*'` routes on length + meaning.
"""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from ..config import TrainConfig
from ..labels_io import content_hash
from ..meaning import encoder_params
from ..split import split_labels
from ..steps import TrainResult, base_policy, certify_and_evaluate, finish, plan, prompt_template_of
from . import NAME

log = logging.getLogger(__name__)
RANK_GRID = (2, 8)
L2_GRID = (1e-2, 1e-1)
STEPS, LR, FOLDS = 200, 0.05, 3


def train_mf(config: TrainConfig, labels: pd.DataFrame, metadata: dict) -> TrainResult:
    labels_hash = metadata.get("content_hash") or content_hash(labels)
    candidates, features, paid = plan(config, labels, metadata)
    split = split_labels(labels, config.calib_fraction, config.test_fraction, config.seed)
    router = fit_mf(config, split, candidates, features, paid, labels_hash, prompt_template_of(metadata))
    router.policy.params.update(encoder_params(metadata, features))
    evaluation = certify_and_evaluate(config, router, split)
    return finish(config, router, evaluation, split, metadata, labels_hash)


def fit_mf(config, split, candidates, features, paid, labels_hash, prompt_template=None):
    """An MFRouter on `split.train` (tau not yet calibrated), rank and L2 by cross-validation on the training rows."""
    from routedvlm.router.mf import MFRouter

    x, y = arrays_of(split.train, features, candidates)
    rank, l2, loss = choose(x, y, config.seed)
    arrays = fit_arrays(x, y, rank, l2, config.seed)
    log.info("mf: rank %d, l2 %g (3-fold log loss %.4f on %d training rows)", rank, l2, loss, len(x))
    policy = base_policy(config, split, candidates, features, paid, labels_hash, NAME,
                         {NAME: {"rank": rank, "l2": l2, "cv_log_loss": loss, "rank_grid": list(RANK_GRID),
                                 "l2_grid": list(L2_GRID), "steps": STEPS, "learning_rate": LR}},
                         prompt_template=prompt_template)
    return MFRouter(policy, arrays)


def arrays_of(train: pd.DataFrame, features: list[str], strategies: list[str]) -> tuple[np.ndarray, np.ndarray]:
    x = train[features].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=np.float64)
    y = train[[f"correct__{s}" for s in strategies]].to_numpy(dtype=bool).astype(np.float64)
    return x, y


def moments(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column means (NaN ignored; an all-NaN column: 0) and spreads (0 -> 1)."""
    import warnings

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column: its mean is 0, its spread 1
        mean, std = np.nanmean(x, axis=0), np.nanstd(x, axis=0)
    mean = np.where(np.isnan(mean), 0.0, mean)
    return mean, np.where(np.isfinite(std) & (std > 0), std, 1.0)


def fit_arrays(x: np.ndarray, y: np.ndarray, rank: int, l2: float, seed: int, steps: int = STEPS) -> dict:
    """The MF arrays fitted on (x, y): full-batch Adam on mean log loss + l2 (|W|² + |V|²)."""
    from routedvlm.router.mf.router import standardise

    mean, std = moments(x)
    z = standardise(x, mean, std)
    n, d = z.shape
    s = y.shape[1]
    rank = max(1, min(rank, d))
    rng = np.random.default_rng(seed)
    base = np.clip(y.mean(axis=0), 1e-3, 1 - 1e-3)
    params = [rng.normal(0, 0.1, (rank, d)), rng.normal(0, 0.1, (s, rank)), np.log(base / (1 - base))]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    for t in range(1, steps + 1):
        w, e, b = params
        h = z @ w.T
        p = 1.0 / (1.0 + np.exp(-np.clip(h @ e.T + b, -40, 40)))
        g = (p - y) / (n * s)
        gh = g @ e
        grads = [gh.T @ z + 2 * l2 * w, g.T @ h + 2 * l2 * e, g.sum(axis=0)]
        for i, gr in enumerate(grads):
            m[i] = 0.9 * m[i] + 0.1 * gr
            v[i] = 0.999 * v[i] + 0.001 * gr * gr
            params[i] = params[i] - LR * (m[i] / (1 - 0.9 ** t)) / (np.sqrt(v[i] / (1 - 0.999 ** t)) + 1e-8)
    return {"mean": mean, "std": std, "proj": params[0], "emb": params[1], "bias": params[2]}


def log_loss(arrays: dict, x: np.ndarray, y: np.ndarray) -> float:
    from routedvlm.router.mf import mf_proba

    p = np.clip(mf_proba(x, *(arrays[k] for k in ("mean", "std", "proj", "emb", "bias"))), 1e-6, 1 - 1e-6)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def choose(x: np.ndarray, y: np.ndarray, seed: int, folds: int = FOLDS) -> tuple[int, float, float]:
    """(rank, l2, loss): the grid point with the least mean held-out log loss over `folds` folds of the rows."""
    order = np.random.default_rng(seed).permutation(len(x))
    parts = np.array_split(order, folds) if len(x) >= 2 * folds else [order]
    best = None
    for rank in RANK_GRID:
        for l2 in L2_GRID:
            losses = []
            for part in parts:
                fit_rows = np.setdiff1d(order, part) if len(parts) > 1 else order
                losses.append(log_loss(fit_arrays(x[fit_rows], y[fit_rows], rank, l2, seed), x[part], y[part]))
            loss = float(np.mean(losses))
            if best is None or loss < best[2] - 1e-12:
                best = (rank, l2, loss)
    return best
