"""train-router as a library call: `train_router(config)` trains the router type `config.router` names, through the
one registry of router types (`routedvlm.router.router_types`); each type's trainer and settings are its own unit
(lightgbm/, knn/, probe/), named by its registry entry.

Every trainer: labels -> split -> fit -> certify the decision rule -> evaluate -> router folder (MLflow is the CLI's);
the shared steps are `steps.py`. `train_router(config)` is what the CLI, the demo and the benchmarks run.
"""
from __future__ import annotations

import importlib
import logging

import pandas as pd

from routedvlm.errors import ConfigError, one_of
from routedvlm.router.router_types import ROUTER_TYPES, trainable, type_facts, with_fact

from .config import TrainConfig
from .labels_io import load_labels
from .share import AUTO, DEFAULT_SHARE, given, settle
from .steps import (TrainResult, base_policy, candidate_strategies, choose_fallback, jsonable, plan, policy_metrics,
                    prompt_template_of, write_outputs)

log = logging.getLogger(__name__)
__all__ = ["TrainResult", "base_policy", "candidate_strategies", "choose_fallback", "jsonable", "plan",
           "policy_metrics", "prompt_template_of", "train_router", "trainer_for", "write_outputs"]


def trainer_for(router: str):
    """The trainer registered for router type `router`: `train(config, labels, metadata) -> TrainResult`."""
    entry = ROUTER_TYPES.get(router)
    if entry is None or entry.trainer is None:
        raise ConfigError(f"The `router` setting must be a trainable router type, one of {one_of(trainable())}. "
                          f"Got {router!r} instead.")
    module, _, name = entry.trainer.partition(":")
    return getattr(importlib.import_module(module), name)


def train_router(config: TrainConfig, labels: pd.DataFrame | None = None, metadata: dict | None = None) -> TrainResult:
    """Train the router type `config.router` (one of `router_types.trainable()`) on `labels` (default: read
    `config.data`); see the module docstring. Raises RoutedVLMError subclasses."""
    train = trainer_for(config.router)
    if config.calibration_data and not type_facts(config.router).calibration_data:
        takes = " or ".join(with_fact("calibration_data"))
        raise ConfigError(f"`--calibration-data` (fresh calibration rows) works with the {takes} router; the "
                          f"{config.router} router reads images or hidden states the rows do not carry. Got "
                          f"--router {config.router}.")
    if labels is None:
        labels, metadata = load_labels(config.data)
    if config.calib_fraction == AUTO and (not type_facts(config.router).chooses_share or config.calibration_data):
        choosers = " and ".join(with_fact("chooses_share"))
        settle(config, f"{DEFAULT_SHARE:g} (auto: " + ("--calibration-data gives the calibration rows" if
                       config.calibration_data else f"the choice simulates the {choosers} router only, not "
                       f"{config.router}") + ")")
    given(config)
    return train(config, labels, dict(metadata or {}))
