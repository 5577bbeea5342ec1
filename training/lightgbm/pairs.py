"""The LightGBM router of one two-model sub-pair of a ladder (../sub_pairs.py: the ladder against its pairs)."""
from __future__ import annotations

import pandas as pd

from ..config import TrainConfig
from . import NAME


def fit_pair_router(config: TrainConfig, train: pd.DataFrame, cands, feats, paid, fallback: str, labels_hash: str,
                    pair) -> object:
    """A sub-pair's LightGBMRouter (sub_pairs.py; tau not yet calibrated) on the training rows `train`."""
    from routedvlm.router.lightgbm import LightGBMRouter
    from routedvlm.router.policy import Policy

    from ..costs import expected_costs
    from ..fit import fit_models, ladder_in, lgb_params

    own = config.settings[NAME]
    params = lgb_params(own.num_leaves, own.learning_rate, config.seed)
    boosters, constants = fit_models(train, feats, cands, num_boost_round=own.num_boost_round,
                                     params=params, cv_folds=own.cv_folds)
    policy = Policy(router_type=NAME, mode=config.mode, strategies=cands, paid_stages=paid, features=feats,
                    ladder=list(ladder_in(train)), expected_cost_ms=expected_costs(train, cands, config.mode, paid),
                    fallback=fallback, target=config.target, training_data_hash=labels_hash,
                    params={"constants": constants, NAME: params, "sub_pair": list(pair)})
    return LightGBMRouter(policy, boosters)
