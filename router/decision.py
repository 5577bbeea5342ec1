"""What a router decides for one sample (`Decision`), and the order decision rules scan candidates in: by expected
cost, ties broken by the canonical strategy order (`strategy_order`). The rules themselves are `decision_rules.py`.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from routedvlm.errors import RouterError
from .strategies import BASE_STRATEGIES, parse_strategy

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
    P(correct) >= tau, else `fallback` (NaN never qualifies): the tau-rule of `decision_rules`, as a function.
    Returns an object array of strategy ids."""
    from .decision_rules import apply_rule, tau_rule

    return apply_rule(tau_rule(tau), p, None, cost_order(list(p.columns), costs), costs, fallback)
