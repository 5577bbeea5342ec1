"""The `knn` router type's trainer (registered in `routedvlm.router.router_types`; no settings of its own, config.py): a bank of the training rows (features + correctness per strategy), with k and the
smoothing prior chosen by leave-one-out log loss on the training rows alone, then the same certification and
evaluation as every type (steps.py).

Default features: the plan's (as LightGBM); `--features 'feat__prompt__meaning_*'` routes on meaning alone.
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
K_GRID = (5, 10, 20, 40, 80)
PRIOR_GRID = (1.0, 4.0)


def train_knn(config: TrainConfig, labels: pd.DataFrame, metadata: dict) -> TrainResult:
    labels_hash = metadata.get("content_hash") or content_hash(labels)
    candidates, features, paid = plan(config, labels, metadata)
    split = split_labels(labels, config.calib_fraction, config.test_fraction, config.seed)
    router = fit_knn(config, split, candidates, features, paid, labels_hash, prompt_template_of(metadata))
    router.policy.params.update(encoder_params(metadata, features))
    evaluation = certify_and_evaluate(config, router, split)
    return finish(config, router, evaluation, split, metadata, labels_hash)


def fit_knn(config, split, candidates, features, paid, labels_hash, prompt_template=None):
    """A KNNRouter on `split.train` (tau not yet calibrated), k and prior by leave-one-out log loss."""
    from routedvlm.router.knn import KNNRouter

    bank = bank_of(split.train, features, candidates)
    k, prior, loss = choose_k(bank, candidates, features)
    log.info("knn: k=%d, prior=%.1f (leave-one-out log loss %.4f on %d training rows)", k, prior, loss, len(bank["x"]))
    policy = base_policy(config, split, candidates, features, paid, labels_hash, NAME,
                         {NAME: {"k": k, "prior": prior, "loo_log_loss": loss, "k_grid": list(K_GRID)}},
                         prompt_template=prompt_template)
    return KNNRouter(policy, bank)


def bank_of(train: pd.DataFrame, features: list[str], strategies: list[str]) -> dict:
    x = train[features].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=np.float32)
    mean = np.nanmean(x, axis=0).astype(np.float32)
    mean = np.where(np.isnan(mean), 0.0, mean).astype(np.float32)
    x = np.where(np.isnan(x), mean, x)
    std = x.std(axis=0).astype(np.float32)
    y = train[[f"correct__{s}" for s in strategies]].to_numpy(dtype=bool).astype(np.float32)
    return {"x": x, "y": y, "mean": mean, "std": np.where(std > 0, std, 1.0).astype(np.float32)}


def choose_k(bank: dict, strategies: list[str], features: list[str]) -> tuple[int, float, float]:
    """(k, prior, loss): the grid point with the least leave-one-out mean log loss over strategies (the runtime's
    `knn_proba` on the training rows, each row's own entry left out)."""
    from routedvlm.router.knn.router import _unit, knn_proba

    unit = _unit((bank["x"] - bank["mean"]) / bank["std"])
    sims = unit @ unit.T
    np.fill_diagonal(sims, -np.inf)
    order = np.argsort(-sims, axis=1, kind="stable")
    y, base = bank["y"], bank["y"].mean(axis=0)
    n = len(y)
    best = None
    for k in sorted({min(k, max(1, n - 1)) for k in K_GRID}):
        for prior in PRIOR_GRID:
            p = np.clip(knn_proba(sims, y, base, k, prior, order), 1e-6, 1 - 1e-6)
            loss = float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))
            if best is None or loss < best[2] - 1e-12:
                best = (k, prior, loss)
    return best
