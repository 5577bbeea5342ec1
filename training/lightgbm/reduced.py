"""The `lightgbm-pca` router type's trainer (`train_lightgbm_pca`; settings: config.LightGBMPCAConfig, the LightGBM
ones + `--pca-components`): the embedding columns among the features (`feat__<stages>__meaning_<i>`,
`feat__<stages>__state_<i>`) reduced to their first `--pca-components` (default 8) principal components
fitted on the training rows alone, stored in the router (router/lightgbm/reduce.py), then one LightGBM model per
strategy on the other features + those components, and the same certification and evaluation as every type.

The boosters see a few meaning dimensions instead of hundreds of raw ones; the same `Reduction.model_matrix` builds
their training matrix here and their input at run time.
"""
from __future__ import annotations

import logging
import re

import numpy as np
import pandas as pd

from routedvlm.errors import TrainingError

from ..config import TrainConfig
from ..labels_io import content_hash
from ..meaning import encoder_params
from ..split import split_labels
from ..steps import TrainResult, base_policy, certify_and_evaluate, finish, plan, prompt_template_of

log = logging.getLogger(__name__)
NAME = "lightgbm-pca"
EMBEDDING = re.compile(r"^feat__[^_].*__(meaning|state)_\d+$")


def train_lightgbm_pca(config: TrainConfig, labels: pd.DataFrame, metadata: dict) -> TrainResult:
    labels_hash = metadata.get("content_hash") or content_hash(labels)
    candidates, features, paid = plan(config, labels, metadata)
    split = split_labels(labels, config.calib_fraction, config.test_fraction, config.seed)
    router = fit_reduced(config, split, candidates, features, paid, labels_hash, prompt_template_of(metadata))
    router.policy.params.update(encoder_params(metadata, features))
    evaluation = certify_and_evaluate(config, router, split)
    return finish(config, router, evaluation, split, metadata, labels_hash)


def embedding_columns(features: list[str]) -> list[str]:
    return [f for f in features if EMBEDDING.match(f)]


def fit_reduced(config, split, candidates, features, paid, labels_hash, prompt_template=None):
    """A LightGBMRouter with a PCA reduction of the embedding columns, fitted on `split.train` (tau not calibrated)."""
    from routedvlm.router.lightgbm import LightGBMRouter
    from routedvlm.router.lightgbm.reduce import fit_pca

    from ..fit import fit_models, lgb_params

    columns = embedding_columns(features)
    if len(columns) < 2:
        raise TrainingError(f"The router type {NAME!r} reduces embedding columns (feat__<stages>__meaning_<i> or "
                            f"__state_<i>), and the features hold {len(columns)}. Add them (`routedvlm labels import-outcomes ... "
                            "--encoder FOLDER --encoder-dims 384` for meaning features, `routedvlm labels add-features` "
                            "for the small model's state), or train --router lightgbm.")
    own = config.settings[NAME]  # this type's settings (config.LightGBMPCAConfig)
    reduction = fit_pca(split.train[columns].to_numpy(dtype=np.float64), columns, own.pca_components)
    x = reduction.model_matrix(features, split.train[features].to_numpy(dtype=np.float64))
    names = reduction.model_names(features)
    frame = pd.DataFrame(x, columns=names, index=split.train.index)
    frame = pd.concat([frame, split.train[[f"correct__{s}" for s in candidates]]], axis=1)
    params = lgb_params(own.num_leaves, own.learning_rate, config.seed)
    boosters, constants = fit_models(frame, names, candidates, num_boost_round=own.num_boost_round,
                                     params=params, cv_folds=own.cv_folds)
    log.info("%s: %d embedding columns -> %d components; %d boosters", NAME, len(columns), len(reduction.names),
             len(boosters))
    policy = base_policy(config, split, candidates, features, paid, labels_hash, NAME,
                         {"constants": constants, NAME: {**params, "num_boost_round": own.num_boost_round,
                                                         "cv_folds": own.cv_folds, "pca_components": own.pca_components,
                                                         "rounds": {s: int(b.current_iteration())
                                                                    for s, b in boosters.items()}}},
                         prompt_template=prompt_template)
    return LightGBMRouter(policy, boosters, reduction)
