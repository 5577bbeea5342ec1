"""The `lightgbm` router type's trainer (`train_lightgbm`, registered in `routedvlm.router.router_types`, with its
settings in config.py): one LightGBM model per candidate strategy on the training rows, then the same certification and evaluation as every type
(../steps.py).

`fit_router` is also what the LightGBM comparison beside a probe (probe/evaluate.py) and the policy template the LoRA
probe starts from fit; `choose_share` is the simulation behind `--calib-fraction auto` (../share.py: this type's
registry entry declares `chooses_share`).
"""
from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
import pandas as pd

from routedvlm.errors import TrainingError

from ..config import TrainConfig
from ..labels_io import content_hash, load_labels
from ..meaning import encoder_params
from ..share import AUTO, DEFAULT_SHARE, REPEATS, candidate_shares, choice_rows, given, settle
from ..split import split_labels
from ..steps import TrainResult, base_policy, certify_and_evaluate, finish, plan, prompt_template_of
from . import NAME

log = logging.getLogger(__name__)


def train_lightgbm(config: TrainConfig, labels: pd.DataFrame, metadata: dict) -> TrainResult:
    """The `lightgbm` router type's trainer: one LightGBM model per candidate strategy on the training rows."""
    labels_hash = metadata.get("content_hash") or content_hash(labels)
    auto = config.calib_fraction == AUTO
    candidates, features, paid = plan(config, labels, metadata, train=choice_rows(
        labels, config.test_fraction, config.seed) if auto else None)
    choose_share(config, labels, candidates, features, paid, labels_hash)  # 'auto': from the choice rows only
    split = split_labels(labels, config.calib_fraction, config.test_fraction, config.seed)
    if config.calibration_data:
        split = with_calibration_rows(split, config.calibration_data, candidates, features)
    log.info("split %s; %d candidates; %d features; paid stages %s", split.sizes(), len(candidates), len(features), paid)
    router = fit_router(config, split, candidates, features, paid, labels_hash,
                        prompt_template=prompt_template_of(metadata))
    router.policy.params.update(encoder_params(metadata, features))
    evaluation = certify_and_evaluate(config, router, split)
    return finish(config, router, evaluation, split, metadata, labels_hash)


def fit_router(config: TrainConfig, split, candidates, features, paid, labels_hash: str, *,
               prompt_template: dict | None = None):
    """A LightGBMRouter (tau not yet calibrated) fitted on `split.train`, costs from the training rows."""
    from routedvlm.router.lightgbm import LightGBMRouter

    from ..fit import fit_models, lgb_params

    own = config.settings[NAME]  # this type's settings (config.py)
    params = lgb_params(own.num_leaves, own.learning_rate, config.seed)
    boosters, constants = fit_models(split.train, features, candidates, num_boost_round=own.num_boost_round,
                                     params=params, cv_folds=own.cv_folds)
    rounds = {s: int(b.current_iteration()) for s, b in boosters.items()}
    policy = base_policy(config, split, candidates, features, paid, labels_hash, NAME,
                         {"constants": constants, NAME: {**params, "num_boost_round": own.num_boost_round,
                                                         "cv_folds": own.cv_folds, "rounds": rounds}},
                         prompt_template=prompt_template)
    return LightGBMRouter(policy, boosters)


def with_calibration_rows(split, path, candidates, features):
    """`split` with the rows of the labels at `path` as its calibration split (TrainingError when they lack a
    column the certificate or the router reads)."""
    from ..split import MIN_ROWS, Split

    fresh, _ = load_labels(path)
    need = [f"correct__{s}" for s in candidates] + [f"latency_ms__{s}" for s in candidates] + list(features)
    missing = [c for c in need if c not in fresh.columns]
    if missing:
        raise TrainingError(f"The calibration labels {path!r} lack columns {missing[:8]}{' ...' if len(missing) > 8 else ''}; "
                            "label them with the same models, K grid and selector as the training labels.")
    if len(fresh) < MIN_ROWS["calibration"]:
        raise TrainingError(f"The calibration labels {path!r} have {len(fresh)} rows; at least "
                            f"{MIN_ROWS['calibration']} are needed.")
    log.info("calibrating on %d fresh rows from %s", len(fresh), path)
    return Split(split.train, fresh.reset_index(drop=True), split.test)


def choose_share(config, labels: pd.DataFrame, candidates, features, paid, labels_hash: str,
                 repeats: int = REPEATS) -> float:
    """Settle `config.calib_fraction` 'auto' by simulating this trainer on the choice rows (share.py's docstring);
    returns the share."""
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
                router = fit_router(inner_cfg, split, candidates, features, paid, labels_hash)
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
