"""Selectors: which K of the small model's reasoning tokens go to the large model.

Each selector maps (number of reasoning tokens n, K, optional per-token scores) to the sorted indices it
keeps, so the kept tokens stay in their original order. `prefix` lets the small model stop after K
tokens; `suffix` needs the whole reasoning; `attention` needs the large model's attention from its answer
position to each reasoning token (computed by the pipeline, in the large model's tokens).
"""
from __future__ import annotations

from routedvlm.errors import ConfigError, one_of


def select_prefix(n: int, k: int, scores=None) -> list[int]:
    """The first K tokens."""
    return list(range(min(n, k)))


def select_suffix(n: int, k: int, scores=None) -> list[int]:
    """The last K tokens (the conclusion)."""
    return list(range(max(0, n - k), n))


def select_attention(n: int, k: int, scores=None) -> list[int]:
    """The K tokens with the highest scores, in original order (ties: the earlier token wins)."""
    if scores is None or len(scores) != n:
        raise ConfigError(f"The attention selector needs one score per reasoning token ({n}); got {scores!r}.")
    ranked = sorted(range(n), key=lambda i: (-scores[i], i))[: min(n, k)]
    return sorted(ranked)


SELECTORS = {"prefix": select_prefix, "suffix": select_suffix, "attention": select_attention}
NEEDS_FULL_REASONING = {"suffix", "attention"}
NEEDS_ATTENTION = {"attention"}


def get_selector(name: str):
    if name not in SELECTORS:
        raise ConfigError(f"The `selector` parameter must be one of {one_of(SELECTORS)}. Got {name!r} instead.")
    return SELECTORS[name]
