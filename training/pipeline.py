"""train-router as a library call: `train_router(config)` trains the router type `config.router` names, through the
one registry of router types (`routedvlm.router.router_types`); this module also holds the LightGBM trainer.

Every trainer: labels -> split -> fit -> certify the decision rule -> evaluate -> router folder (MLflow is the CLI's);
the shared steps are `steps.py`. `train_router(config)` is what the CLI, the demo and the benchmarks run.
"""
from __future__ import annotations

import importlib
import logging

import pandas as pd

from routedvlm.errors import ConfigError, TrainingError, one_of
from routedvlm.router.router_types import ROUTER_TYPES, type_facts

from .config import TrainConfig
from .labels_io import content_hash, load_labels
from .meaning import encoder_params
from .share import AUTO, DEFAULT_SHARE, choice_rows, choose_share, given, settle
from .split import split_labels
from .steps import (TrainResult, base_policy, candidate_strategies, certify_and_evaluate, choose_fallback, finish,
                    fit_router, jsonable, plan, policy_metrics, prompt_template_of, write_outputs)

log = logging.getLogger(__name__)
__all__ = ["TrainResult", "base_policy", "candidate_strategies", "choose_fallback", "fit_router", "jsonable",
           "plan", "policy_metrics", "prompt_template_of", "train_lightgbm", "train_router", "trainer_for",
           "write_outputs"]


def trainer_for(router: str):
    """The trainer registered for router type `router`: `train(config, labels, metadata) -> TrainResult`."""
    from routedvlm.router.router_types import ROUTER_TYPES, TRAINABLE

    entry = ROUTER_TYPES.get(router)
    if entry is None or entry.trainer is None:
        raise ConfigError(f"The `router` setting must be a trainable router type, one of {one_of(TRAINABLE)}. "
                          f"Got {router!r} instead.")
    module, _, name = entry.trainer.partition(":")
    return getattr(importlib.import_module(module), name)


def train_router(config: TrainConfig, labels: pd.DataFrame | None = None, metadata: dict | None = None) -> TrainResult:
    """Train the router type `config.router` (lightgbm, lora-probe, self-probe) on `labels` (default: read
    `config.data`); see the module docstring. Raises RoutedVLMError subclasses."""
    train = trainer_for(config.router)
    if config.calibration_data and not type_facts(config.router).calibration_data:
        takes = " or ".join(n for n, t in ROUTER_TYPES.items() if t.calibration_data)
        raise ConfigError(f"`--calibration-data` (fresh calibration rows) works with the {takes} router; the "
                          f"{config.router} router reads images or hidden states the rows do not carry. Got "
                          f"--router {config.router}.")
    if labels is None:
        labels, metadata = load_labels(config.data)
    if config.calib_fraction == AUTO and (config.router != "lightgbm" or config.calibration_data):
        settle(config, f"{DEFAULT_SHARE:g} (auto: " + ("--calibration-data gives the calibration rows" if
                       config.calibration_data else f"the choice simulates the lightgbm router only, not "
                       f"{config.router}") + ")")
    given(config)
    return train(config, labels, dict(metadata or {}))


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


def with_calibration_rows(split, path, candidates, features):
    """`split` with the rows of the labels at `path` as its calibration split (TrainingError when they lack a
    column the certificate or the router reads)."""
    from .split import MIN_ROWS, Split

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
