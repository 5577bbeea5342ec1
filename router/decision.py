"""What a router decides for one sample, and the decision rule that turns P(correct) into a strategy.

The rule: per row, the cheapest strategy (by expected cost) whose P(correct) >= tau, else the fallback.
Ties are broken by cost, then by the canonical strategy order (`strategy_order`).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from routedvlm.errors import RouterError
from .strategies import BASE_STRATEGIES, parse_strategy

FALLBACK_REASON = "fallback"
ACCEPT_REASON = "p>=tau"


@dataclass(frozen=True)
class Decision:
    """A routing decision. `keep_tokens` is K for `transfer_<K>`, None otherwise (also for `transfer_all`,
    which keeps every reasoning token). `p_correct` has one entry per candidate strategy."""

    strategy: str
    keep_tokens: int | None
    p_correct: dict[str, float] = field(default_factory=dict)
    reason: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def strategy_order(strategy_id: str) -> tuple:
    """Sort key of the canonical order: small_direct, large_direct, small_reason, large_reason,
    transfer_<K> by increasing K, transfer_all."""
    s = parse_strategy(strategy_id)
    if s.kind in BASE_STRATEGIES:
        return (BASE_STRATEGIES.index(s.kind), 0)
    return (len(BASE_STRATEGIES), s.keep_tokens if s.keep_tokens is not None else math.inf)


def keep_tokens_of(strategy_id: str) -> int | None:
    """K for `transfer_<K>`; None for every other strategy, including `transfer_all`."""
    return parse_strategy(strategy_id).keep_tokens


def cost_order(strategies, costs: dict[str, float]) -> list[str]:
    """Strategies sorted by cost, then canonical order. Raises RouterError when a cost is missing."""
    missing = [s for s in strategies if s not in costs]
    if missing:
        raise RouterError(
            f"The `costs` of the decision rule must have an entry for every strategy. Missing {sorted(missing)}; "
            f"given costs for {sorted(costs)}. Add the expected latency (ms) of each candidate."
        )
    return sorted(strategies, key=lambda s: (float(costs[s]), strategy_order(s)))


def choose(p, costs: dict[str, float], tau: float, fallback: str) -> np.ndarray:
    """Per row of `p` (DataFrame: columns = strategies, values = P(correct)), the cheapest strategy whose
    P(correct) >= tau, else `fallback`. NaN never qualifies. Returns an object array of strategy ids."""
    order = cost_order(list(p.columns), costs)
    if len(p) == 0:
        return np.array([], dtype=object)
    values = p[order].to_numpy(dtype=float) if order else np.zeros((len(p), 0))
    ok = values >= float(tau)
    any_ok = ok.any(axis=1)
    first = ok.argmax(axis=1) if order else np.zeros(len(p), dtype=int)
    names = np.array(order + [fallback], dtype=object)
    return np.where(any_ok, names[first] if order else fallback, fallback).astype(object)


def choose_one(p: dict[str, float], order: list[str], tau: float, fallback: str) -> tuple[str, str]:
    """The scalar form of `choose` for one row, with `order` from `cost_order`: (strategy, reason)."""
    for s in order:
        v = p[s]
        if v >= tau:  # NaN compares False
            return s, ACCEPT_REASON
    return fallback, FALLBACK_REASON
