"""`train-router --router self-probe`: the large model's hidden state of its own `large_direct` pass, plus the
policy's tabular features, into one linear (logistic) head per candidate strategy.

The hidden states are recomputed, not stored by the labeller: the labelled samples are reloaded by id (as for the
LoRA probe) and `large_direct` is re-run through `CollaborativePipeline.run` with the hidden-state capture on
(`hidden_states.py`: transformers hooks, or vLLM's hidden-state extraction when the large side is `vllm:<folder>`) —
the code path RoutedVLM runs, so training and run-time inputs are the same numbers. The recomputed answers are checked against the labels' `answer__large_direct`. Split, expected costs,
certified decision rule, evaluation and outputs are the LightGBM router's (training/steps.py).
"""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from routedvlm.errors import ConfigError
from routedvlm.router.self_probe import HIDDEN_KEY, SelfProbeRouter
from routedvlm.router.strategies import LARGE_DIRECT

from . import SELF_PROBE
from .hidden_states import HiddenInfo, attach_hidden, large_on_engine, n_layers_of, resolve_large  # noqa: F401

log = logging.getLogger(__name__)
DEFAULT_LAYERS = (-1,)
DEFAULT_POSITION = "prompt_last"


def design_matrix(df: pd.DataFrame, features: list[str]) -> np.ndarray:
    """[hidden vector | features] per row (NaN features -> 0 before scaling, as the router does)."""
    h = np.stack([np.asarray(v, dtype=np.float64) for v in df[HIDDEN_KEY]])
    f = np.nan_to_num(df[features].to_numpy(dtype=np.float64), nan=0.0) if features else np.zeros((len(df), 0))
    return np.concatenate([h, f], axis=1)


def fit_head(x: np.ndarray, targets: dict[str, np.ndarray], seed: int = 0) -> dict:
    """Standardised inputs, one L2 logistic regression per strategy (C chosen by 5-fold CV on log loss); a
    strategy whose training labels are constant gets a constant probability (bias only, clipped to (0.001, 0.999))."""
    from sklearn.linear_model import LogisticRegressionCV

    mean, std = x.mean(axis=0), x.std(axis=0)
    std = np.where(std > 1e-8, std, 1.0)
    z = (x - mean) / std
    weight, bias = np.zeros((x.shape[1], len(targets))), np.zeros(len(targets))
    for j, (strategy, y) in enumerate(targets.items()):
        y = np.asarray(y, dtype=int)
        if y.min() == y.max() or min(np.bincount(y, minlength=2)) < 5:
            p = float(np.clip(y.mean(), 1e-3, 1 - 1e-3))
            bias[j] = np.log(p / (1 - p))
            continue
        model = LogisticRegressionCV(Cs=np.logspace(-3, 1, 9), l1_ratios=(0.0,), cv=5, scoring="neg_log_loss",
                                     max_iter=2000, random_state=seed, use_legacy_attributes=False).fit(z, y)
        weight[:, j], bias[j] = np.ravel(model.coef_)[: x.shape[1]], float(np.ravel(model.intercept_)[0])
    return {"weight": weight, "bias": bias, "mean": mean, "std": std}


def fit_self_probe(config, split, candidates, features, paid, labels_hash: str, info: HiddenInfo, *,
                   prompt_template: dict | None = None) -> SelfProbeRouter:
    """A SelfProbeRouter (decision rule not yet certified) with its head fitted on `split.train`."""
    from ..steps import base_policy

    if config.mode != "cascade":
        raise ConfigError("The self-probe reads the large_direct pass, which only cascade mode pays first: use "
                          f"--mode cascade (got {config.mode!r}).")
    head = fit_head(design_matrix(split.train, features),
                    {s: split.train[f"correct__{s}"].to_numpy() for s in candidates}, seed=config.seed)
    policy = base_policy(config, split, candidates, features, paid, labels_hash, SELF_PROBE,
                         {**info.params(), "head_kind": "logistic"}, prompt_template=prompt_template)
    return SelfProbeRouter(policy, head)


def with_large_direct(paid: list[str], labels: pd.DataFrame) -> list[str]:
    """`paid` plus `large_direct`, whose hidden state the probe reads: on a ladder the most expensive model (always
    named `large`) is the local model whose direct pass the climb then pays last."""
    from routedvlm.router.ladder import paid_order

    from ..fit import ladder_in

    return paid if not paid or LARGE_DIRECT in paid else paid_order([*paid, LARGE_DIRECT], ladder_in(labels))


LAYER_FRACTIONS = (1 / 3, 1 / 2, 2 / 3, 1.0)  # the candidate depths when --hidden-layers is not given


def default_layers(n_layers: int) -> list[int]:
    """The candidate layers at 1/3, 1/2, 2/3 of the depth and the last (index round(f * (n - 1))); `choose_layer`
    keeps one of them, chosen on the training rows only."""
    return sorted({int(round(f * (n_layers - 1))) for f in LAYER_FRACTIONS})


def choose_layer(split, info: HiddenInfo, seed: int = 0):
    """(split, info) keeping the one captured layer whose hidden state best predicts large_direct's correctness on
    the TRAINING rows (mean 5-fold cross-validated log loss of a logistic head; calibration and test rows are not
    looked at). Nothing to choose with one layer."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import cross_val_score

    if len(info.layers) < 2:
        return split, info
    width = info.size // len(info.layers)
    h = np.stack([np.asarray(v, dtype=np.float64) for v in split.train[HIDDEN_KEY]])
    y = split.train[f"correct__{LARGE_DIRECT}"].to_numpy(dtype=int)
    scores = {}
    for i, layer in enumerate(info.layers):
        block = h[:, i * width:(i + 1) * width]
        z = (block - block.mean(axis=0)) / np.where(block.std(axis=0) > 1e-8, block.std(axis=0), 1.0)
        folds = min(5, int(min(y.sum(), len(y) - y.sum())))
        scores[layer] = (float(-cross_val_score(LogisticRegression(C=0.1, max_iter=2000, random_state=seed), z, y,
                                                cv=folds, scoring="neg_log_loss").mean()) if folds >= 2 else 0.0)
    best = min(info.layers, key=lambda layer: (scores[layer], -layer))  # ties: the deeper layer
    i = info.layers.index(best)
    cut = lambda df: df.assign(**{HIDDEN_KEY: [np.asarray(v)[i * width:(i + 1) * width] for v in df[HIDDEN_KEY]]})  # noqa: E731
    from dataclasses import replace

    log.info("self-probe layer %s chosen on the training rows (cross-validated log loss per layer: %s)", best, scores)
    new = replace(info, layers=[best], size=width, layer_scores={str(k): v for k, v in scores.items()})
    return type(split)(cut(split.train), cut(split.calibration), cut(split.test)), new


def prepare_hidden(config, labels: pd.DataFrame, metadata: dict) -> tuple[pd.DataFrame, HiddenInfo]:
    """The labels with `image`, `question` and the hidden-state column (samples reloaded, large_direct re-run)."""
    from .data import attach_samples

    large = resolve_large(config, metadata)
    own = config.settings[SELF_PROBE]  # this type's settings (config.py)
    data = attach_samples(labels, metadata, own.dataset)
    layers = own.hidden_layers
    if not layers:
        n = n_layers_of(large)
        layers = default_layers(n) if n else [-1]
    return attach_hidden(data, metadata, large, layers, own.hidden_position,
                         engine=large_on_engine(config, metadata))


def compare_with_lightgbm(ev: dict, router, config, split, candidates, features, paid, labels_hash: str) -> dict:
    """The evaluation with a LightGBM router on the same split and features beside the self-probe (its row and
    AUC), and the AUROC of P(large_direct correct) of both on the test rows."""
    from sklearn.metrics import roc_auc_score

    from ..lightgbm import NAME
    from .evaluate import lightgbm_comparison, side_by_side

    comparison = lightgbm_comparison(config, split, candidates, features, paid, labels_hash)
    out = side_by_side(ev, comparison)
    y = split.test[f"correct__{LARGE_DIRECT}"].to_numpy(dtype=int)
    if LARGE_DIRECT in candidates and 0 < y.sum() < len(y):
        auroc = {SELF_PROBE: float(roc_auc_score(y, router.predict_proba(split.test)[LARGE_DIRECT]))}
        if comparison is not None:
            auroc[NAME] = float(roc_auc_score(y, comparison["router"].predict_proba(split.test)[LARGE_DIRECT]))
        out["auroc_large_direct"] = auroc
    out["self_probe"] = dict(router.policy.params.get("recomputed") or {})
    return out


def train_self_probe(config, labels: pd.DataFrame, metadata: dict):
    """The `self-probe` router type's trainer: plan, the hidden states of every row, split, fit the head, certify and
    evaluate beside a LightGBM router on the same split, write the outputs. Returns a TrainResult."""
    from ..labels_io import content_hash
    from ..split import split_labels
    from ..steps import certify_and_evaluate, finish, plan, prompt_template_of

    labels_hash = metadata.get("content_hash") or content_hash(labels)
    candidates, features, paid = plan(config, labels, metadata)
    paid = with_large_direct(paid, labels)
    labels, hidden = prepare_hidden(config, labels, metadata)
    split = split_labels(labels, config.calib_fraction, config.test_fraction, config.seed)
    log.info("split %s; %d candidates; %d features; paid stages %s", split.sizes(), len(candidates), len(features), paid)
    split, hidden = choose_layer(split, hidden, config.seed)  # on the training rows only
    router = fit_self_probe(config, split, candidates, features, paid, labels_hash, hidden,
                            prompt_template=prompt_template_of(metadata))
    evaluation = certify_and_evaluate(config, router, split)
    evaluation = compare_with_lightgbm(evaluation, router, config, split, candidates, features, paid, labels_hash)
    return finish(config, router, evaluation, split, metadata, labels_hash)
