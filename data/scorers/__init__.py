"""Benchmark scorers: score(metric, prediction, references, options=None, **extra) -> float in [0, 1].

Each metric matches the reference scorer named in its docstring (see shared notes `scorers.md`);
`is_correct` thresholds the score, `parses` says whether an answer could be read at all.
"""
from __future__ import annotations

from routedvlm.errors import ConfigError, one_of
from .choice import circular_accuracy, extract_choice, option_dict, parses_multiple_choice, score_multiple_choice
from .mathvista import parses_mathvista, score_mathvista
from .mmmu import parses_mmmu, score_mmmu
from .text import (
    extract_yes_no,
    parses_anls,
    parses_exact_match,
    parses_relaxed_accuracy,
    parses_vqa_accuracy,
    parses_yes_no,
    score_anls,
    score_exact_match,
    score_relaxed_accuracy,
    score_vqa_accuracy,
    score_yes_no,
)

_REGISTRY = {
    "anls": (score_anls, parses_anls),
    "exact_match": (score_exact_match, parses_exact_match),
    "mathvista": (score_mathvista, parses_mathvista),
    "mmmu": (score_mmmu, parses_mmmu),
    "multiple_choice": (score_multiple_choice, parses_multiple_choice),
    "relaxed_accuracy": (score_relaxed_accuracy, parses_relaxed_accuracy),
    "vqa_accuracy": (score_vqa_accuracy, parses_vqa_accuracy),
    "yes_no": (score_yes_no, parses_yes_no),
}
METRICS = tuple(sorted(_REGISTRY))
DEFAULT_THRESHOLD = 0.5

__all__ = [
    "DEFAULT_THRESHOLD", "METRICS", "circular_accuracy", "extract_choice", "extract_yes_no",
    "get_scorer", "is_correct", "option_dict", "parses", "score",
]


def get_scorer(metric: str):
    """(score_fn, parses_fn) for a metric name; ConfigError naming the valid metrics otherwise."""
    try:
        return _REGISTRY[metric]
    except (KeyError, TypeError):
        raise ConfigError(
            f"The `metric` must be one of {one_of(METRICS)}; got {metric!r}. "
            "Pick the metric of the benchmark's official scorer (exact_match is the generic fallback)."
        ) from None


def _as_references(references) -> list[str]:
    if references is None:
        return []
    if isinstance(references, str):
        return [references]
    return [str(r) for r in references]


def score(metric: str, prediction, references, options=None, **extra) -> float:
    """Score one prediction against its gold answers with the named metric, in [0, 1].

    `references` is a list of gold strings (a single string is accepted); `options` a list of option
    texts or a letter -> text dict; `extra` per-sample fields (MMMU `question_type`, MathVista
    `question_type`, `answer_type`, `precision`, `choices`). A None prediction scores 0.
    """
    score_fn, _ = get_scorer(metric)
    if prediction is None:
        return 0.0
    value = float(score_fn(str(prediction), _as_references(references), options, **extra))
    return min(1.0, max(0.0, value))


def is_correct(metric: str, prediction, references, options=None, threshold: float = DEFAULT_THRESHOLD, **extra) -> bool:
    """`score(...) >= threshold` (default 0.5)."""
    if not 0.0 <= float(threshold) <= 1.0:
        raise ConfigError(f"The `threshold` must be a number in [0, 1]; got {threshold!r}.")
    return score(metric, prediction, references, options, **extra) >= threshold


def parses(metric: str, prediction, options=None, **extra) -> bool:
    """Whether the prediction yields an answer under the metric's extraction rules (a labelling feature)."""
    _, parses_fn = get_scorer(metric)
    if prediction is None:
        return False
    return bool(parses_fn(str(prediction), options, **extra))
