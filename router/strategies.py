"""The closed set of strategy ids (DESIGN.md): parsing, validation and what each one runs.

Strategy ids are part of the labels schema; feature names `feat__<stages>__<name>` say which
stages must have run for the feature to exist.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from routedvlm.errors import UnknownStrategyError, one_of

SMALL_DIRECT = "small_direct"
LARGE_DIRECT = "large_direct"
SMALL_REASON = "small_reason"
LARGE_REASON = "large_reason"
TRANSFER_ALL = "transfer_all"
BASE_STRATEGIES = (SMALL_DIRECT, LARGE_DIRECT, SMALL_REASON, LARGE_REASON)
DEFAULT_K_GRID = (16, 32, 64, 128, 256)
FEATURE_STAGES = ("prompt", LARGE_DIRECT, SMALL_DIRECT)

_TRANSFER_RE = re.compile(r"^transfer_(\d+)$")


@dataclass(frozen=True)
class Strategy:
    """A parsed strategy id. `keep_tokens` is K for `transfer_<K>`, None otherwise."""

    id: str
    kind: str  # one of BASE_STRATEGIES, or "transfer"
    keep_tokens: int | None = None

    @property
    def is_transfer(self) -> bool:
        return self.kind == "transfer"

    @property
    def answerer(self) -> str:
        """Which side produces the final answer: "small" or "large"."""
        return "small" if self.kind in (SMALL_DIRECT, SMALL_REASON) else "large"


def transfer_id(k: int | None) -> str:
    """`transfer_<k>`, or `transfer_all` for k=None."""
    return TRANSFER_ALL if k is None else f"transfer_{int(k)}"


def default_strategies(k_grid=DEFAULT_K_GRID) -> list[str]:
    """Every strategy id for a K grid, in the canonical order."""
    return [*BASE_STRATEGIES, *(transfer_id(k) for k in k_grid), TRANSFER_ALL]


def parse_strategy(strategy_id: str) -> Strategy:
    """Parse and validate a strategy id; raises UnknownStrategyError naming the valid ids."""
    if isinstance(strategy_id, Strategy):
        return strategy_id
    if not isinstance(strategy_id, str):
        raise UnknownStrategyError(
            f"A strategy id must be a string. Got {type(strategy_id).__name__} {strategy_id!r} instead."
        )
    if strategy_id in BASE_STRATEGIES:
        return Strategy(strategy_id, strategy_id)
    if strategy_id == TRANSFER_ALL:
        return Strategy(TRANSFER_ALL, "transfer", None)
    m = _TRANSFER_RE.match(strategy_id)
    if m and int(m.group(1)) > 0:
        return Strategy(strategy_id, "transfer", int(m.group(1)))
    raise UnknownStrategyError(
        f"Unknown strategy id {strategy_id!r}. Valid ids are "
        f"{one_of([*BASE_STRATEGIES, TRANSFER_ALL])} or 'transfer_<K>' with K a positive integer "
        f"(e.g. 'transfer_64')."
    )


def is_strategy(strategy_id: str) -> bool:
    try:
        parse_strategy(strategy_id)
    except UnknownStrategyError:
        return False
    return True


def parse_k_grid(value) -> tuple[int, ...]:
    """Parse '16,32,64' or an iterable of ints into a sorted tuple of unique positive ints."""
    from routedvlm.errors import ConfigError

    items = value.split(",") if isinstance(value, str) else list(value)
    try:
        ks = sorted({int(str(k).strip()) for k in items if str(k).strip()})
    except ValueError:
        raise ConfigError(
            f"The K grid must be comma-separated positive integers such as '16,32,64'. Got {value!r} instead."
        ) from None
    if not ks or ks[0] <= 0:
        raise ConfigError(
            f"The K grid must hold at least one positive integer, e.g. '16,32,64'. Got {value!r} instead."
        )
    return tuple(ks)


def feature_stages(feature_name: str) -> tuple[str, ...]:
    """The stages a feature column `feat__<stages>__<name>` needs, e.g. ('large_direct', 'small_direct')."""
    parts = feature_name.split("__")
    if len(parts) < 3 or parts[0] != "feat":
        raise UnknownStrategyError(
            f"A feature column must be named 'feat__<stages>__<name>'. Got {feature_name!r} instead."
        )
    stages = tuple(parts[1].split("+"))
    bad = [s for s in stages if s not in FEATURE_STAGES]
    if bad:
        raise UnknownStrategyError(
            f"Feature {feature_name!r} names unknown stage(s) {bad}; stages are {one_of(FEATURE_STAGES)}."
        )
    return stages


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
