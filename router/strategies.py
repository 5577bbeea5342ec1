"""The closed set of strategy ids (DESIGN.md): parsing, validation and what each one runs, for a pair or a ladder.

A ladder is an ordered list of N >= 2 models, cheapest first, named by position (`ladder_aliases`): `small`, `large`
for a pair; `small`, `mid`, `large` for three; `small`, `mid1` ... `mid<N-2>`, `large` beyond. Strategy ids:
`<alias>_direct`, `<alias>_reason`, and transfers of one model's reasoning to a more expensive one:
`transfer_<src>_<dst>_<K>` / `transfer_<src>_<dst>_all`, where the small -> large transfer keeps its two-model
spelling `transfer_<K>` / `transfer_all` (the long spelling of that pair is accepted and canonicalised). So every id
of the two-model version keeps its meaning. Feature names `feat__<stages>__<name>` say which stages must have run for
the feature to exist: `prompt` or `<alias>_direct`.
"""
from __future__ import annotations

import functools
import itertools
import math
import re
from dataclasses import dataclass

from routedvlm.errors import UnknownStrategyError, one_of

SMALL, LARGE = "small", "large"
SMALL_DIRECT = "small_direct"
LARGE_DIRECT = "large_direct"
SMALL_REASON = "small_reason"
LARGE_REASON = "large_reason"
TRANSFER_ALL = "transfer_all"
BASE_STRATEGIES = (SMALL_DIRECT, LARGE_DIRECT, SMALL_REASON, LARGE_REASON)
DEFAULT_K_GRID = (16, 32, 64, 128, 256)
FEATURE_STAGES = ("prompt", LARGE_DIRECT, SMALL_DIRECT)  # the stages of a pair; a ladder adds `<alias>_direct`
MODES = ("direct", "reason")
MAX_LADDER = 10
MAX_KEEP_TOKENS = 65536  # K of transfer_<K>: no reasoning run is longer (a larger K is a typo or an attack)

_ALIAS = r"(?:small|large|mid\d*)"
_ALIAS_RE = re.compile(rf"^{_ALIAS}$")
_MODE_RE = re.compile(rf"^(?P<model>{_ALIAS})_(?P<mode>direct|reason)$")
_TRANSFER_RE = re.compile(r"^transfer_(\d+)$")
_LADDER_TRANSFER_RE = re.compile(rf"^transfer_(?P<src>{_ALIAS})_(?P<dst>{_ALIAS})_(?P<k>\d+|all)$")


def ladder_aliases(n: int) -> tuple[str, ...]:
    """The position names of an N-model ladder, cheapest first: ('small', 'large'), ('small', 'mid', 'large'),
    ('small', 'mid1', 'mid2', 'large'), ..."""
    if not isinstance(n, int) or not 2 <= n <= MAX_LADDER:
        raise UnknownStrategyError(f"A ladder has 2 to {MAX_LADDER} models. Got {n!r}.")
    if n == 2:
        return (SMALL, LARGE)
    if n == 3:
        return (SMALL, "mid", LARGE)
    return (SMALL, *(f"mid{i}" for i in range(1, n - 1)), LARGE)


def is_alias(name) -> bool:
    return isinstance(name, str) and bool(_ALIAS_RE.match(name)) and name != "mid0"


def alias_rank(alias: str) -> float:
    """Position of an alias on any ladder that has it: small 0, mid / mid1 1, mid<i> i, large last (inf)."""
    if alias == SMALL:
        return 0
    if alias == LARGE:
        return math.inf
    if alias == "mid":
        return 1
    if is_alias(alias):
        return int(alias[3:])
    raise UnknownStrategyError(f"Unknown model alias {alias!r}; a ladder names its models {one_of(ladder_aliases(4))} "
                               "(small, mid for three models, mid1..mid<N-2> for more, large).")


@dataclass(frozen=True)
class Strategy:
    """A parsed strategy id.

    `kind`: the id itself for a direct or reasoning strategy (`small_direct`, `mid_reason`, ...), "transfer" for a
    transfer; `mode`: "direct", "reason" or "transfer"; `model`: the alias of the model that gives the final answer;
    `source`: the alias whose reasoning a transfer keeps (None otherwise); `keep_tokens`: K for a transfer of K kept
    tokens, None for `..._all` and for every other strategy."""

    id: str
    kind: str
    keep_tokens: int | None = None
    mode: str = "direct"
    model: str = LARGE
    source: str | None = None

    @property
    def is_transfer(self) -> bool:
        return self.kind == "transfer"

    @property
    def answerer(self) -> str:
        """The alias of the model that produces the final answer ("small" / "large" for a pair)."""
        return self.model

    @property
    def models(self) -> tuple[str, ...]:
        """Every model this strategy runs, cheapest first."""
        return (self.source, self.model) if self.source else (self.model,)

    @property
    def escalate_id(self) -> str | None:
        """The id of a transfer's two-stage increment (`escalate_<K>` for the pair, `escalate_<src>_<dst>_<K>`)."""
        return "escalate_" + self.id[len("transfer_"):] if self.is_transfer else None


def transfer_id(k: int | None, source: str = SMALL, target: str = LARGE) -> str:
    """`transfer_<k>` / `transfer_all` (k=None) for small -> large; `transfer_<src>_<dst>_<k|all>` for another pair."""
    if alias_rank(source) >= alias_rank(target):
        raise UnknownStrategyError(f"A transfer goes from a cheaper model to a more expensive one; {source!r} -> "
                                   f"{target!r} does not.")
    tail = "all" if k is None else str(int(k))
    if (source, target) == (SMALL, LARGE):
        return TRANSFER_ALL if k is None else f"transfer_{int(k)}"
    return f"transfer_{source}_{target}_{tail}"


def default_strategies(k_grid=DEFAULT_K_GRID) -> list[str]:
    """Every strategy id of a pair for a K grid, in the canonical order."""
    return [*BASE_STRATEGIES, *(transfer_id(k) for k in k_grid), TRANSFER_ALL]


def ladder_strategies(aliases, k_grid=DEFAULT_K_GRID, pairs=None, *, reason=True, transfer_all=True) -> list[str]:
    """The strategy grid of a ladder, canonical order: every direct, every reasoning (`reason`), and for each transfer
    pair (src, dst) in `pairs` (default: every cheaper -> more expensive pair) one transfer per K (+ `_all`).
    `ladder_strategies(('small', 'large'), k)` equals `default_strategies(k)`."""
    aliases = tuple(aliases)
    check_ladder(aliases)
    pairs = list(itertools.combinations(aliases, 2)) if pairs is None else [tuple(p) for p in pairs]
    for src, dst in pairs:
        if src not in aliases or dst not in aliases:
            raise UnknownStrategyError(f"Transfer pair {src}->{dst} names a model not on the ladder {list(aliases)}.")
    ids = [f"{a}_direct" for a in aliases] + ([f"{a}_reason" for a in aliases] if reason else [])
    for src, dst in pairs:
        ids += [transfer_id(k, src, dst) for k in k_grid] + ([transfer_id(None, src, dst)] if transfer_all else [])
    return sorted(dict.fromkeys(ids), key=strategy_order)


def check_ladder(aliases) -> None:
    """Raise UnknownStrategyError unless `aliases` are exactly the position names of a ladder of their length."""
    aliases = tuple(aliases)
    if len(aliases) < 2 or aliases != ladder_aliases(len(aliases)):
        raise UnknownStrategyError(f"A ladder of {len(aliases)} models is named {list(ladder_aliases(max(2, len(aliases))))} "
                                   f"(cheapest first). Got {list(aliases)}.")


def _keep_ok(digits: str) -> bool:
    """Whether the digits of a K are an integer in [1, MAX_KEEP_TOKENS] (checked by length first: no huge int)."""
    return len(digits) <= len(str(MAX_KEEP_TOKENS)) and 0 < int(digits) <= MAX_KEEP_TOKENS


def parse_strategy(strategy_id: str) -> Strategy:
    """Parse and validate a strategy id; raises UnknownStrategyError naming the valid ids."""
    if isinstance(strategy_id, Strategy):
        return strategy_id
    if not isinstance(strategy_id, str):
        raise UnknownStrategyError(
            f"A strategy id must be a string. Got {type(strategy_id).__name__} {strategy_id!r} instead."
        )
    m = _MODE_RE.match(strategy_id)
    if m and is_alias(m.group("model")):
        return Strategy(strategy_id, strategy_id, None, m.group("mode"), m.group("model"))
    if strategy_id == TRANSFER_ALL:
        return Strategy(TRANSFER_ALL, "transfer", None, "transfer", LARGE, SMALL)
    m = _TRANSFER_RE.match(strategy_id)
    if m and _keep_ok(m.group(1)):
        return Strategy(strategy_id, "transfer", int(m.group(1)), "transfer", LARGE, SMALL)
    m = _LADDER_TRANSFER_RE.match(strategy_id)
    if m and is_alias(m.group("src")) and is_alias(m.group("dst")) and (m.group("k") == "all" or _keep_ok(m.group("k"))):
        src, dst = m.group("src"), m.group("dst")
        if alias_rank(src) < alias_rank(dst):
            k = None if m.group("k") == "all" else int(m.group("k"))
            return Strategy(transfer_id(k, src, dst), "transfer", k, "transfer", dst, src)
    raise UnknownStrategyError(
        f"Unknown strategy id {strategy_id!r}. Valid ids are "
        f"{one_of([*BASE_STRATEGIES, TRANSFER_ALL])} or 'transfer_<K>' with K an integer in [1, {MAX_KEEP_TOKENS}] "
        f"(e.g. 'transfer_64'); on a ladder also '<model>_direct', '<model>_reason' and "
        f"'transfer_<from>_<to>_<K|all>' (e.g. 'mid_direct', 'transfer_small_mid_64'), models named "
        "small, mid (mid1, mid2, ... beyond three models) and large, a transfer going to a more expensive model."
    )


def is_strategy(strategy_id: str) -> bool:
    try:
        parse_strategy(strategy_id)
    except UnknownStrategyError:
        return False
    return True


def strategy_models(strategy_ids) -> tuple[str, ...]:
    """The aliases the strategies run, cheapest first."""
    names = {a for s in strategy_ids for a in parse_strategy(s).models}
    return tuple(sorted(names, key=alias_rank))


def parse_k_grid(value) -> tuple[int, ...]:
    """Parse '16,32,64' or an iterable of ints into a sorted tuple of unique positive ints."""
    from routedvlm.errors import ConfigError

    items = value.split(",") if isinstance(value, str) else list(value)
    try:
        if any(len(str(k).strip()) > 12 for k in items):
            raise ValueError("too many digits")
        ks = sorted({int(str(k).strip()) for k in items if str(k).strip()})
    except ValueError:
        raise ConfigError(
            f"The K grid must be comma-separated positive integers such as '16,32,64'. Got {value!r} instead."
        ) from None
    if not ks or ks[0] <= 0:
        raise ConfigError(
            f"The K grid must hold at least one positive integer, e.g. '16,32,64'. Got {value!r} instead."
        )
    if ks[-1] > MAX_KEEP_TOKENS:
        raise ConfigError(f"The K grid's values must be at most {MAX_KEEP_TOKENS} (a router with a larger K does not "
                          f"load). Got {ks[-1]} in {value!r}; a K beyond the reasoning length is transfer_all.")
    return tuple(ks)


def is_feature_stage(stage: str) -> bool:
    """`prompt` or `<alias>_direct` (the stages a feature can need)."""
    if stage == "prompt":
        return True
    m = _MODE_RE.match(stage)
    return bool(m) and m.group("mode") == "direct" and is_alias(m.group("model"))


@functools.lru_cache(maxsize=4096)  # a pure function of the name, read for every feature on every request
def feature_stages(feature_name: str) -> tuple[str, ...]:
    """The stages a feature column `feat__<stages>__<name>` needs, e.g. ('large_direct', 'small_direct')."""
    parts = feature_name.split("__")
    if len(parts) < 3 or parts[0] != "feat":
        raise UnknownStrategyError(
            f"A feature column must be named 'feat__<stages>__<name>'. Got {feature_name!r} instead."
        )
    stages = tuple(parts[1].split("+"))
    bad = [s for s in stages if not is_feature_stage(s)]
    if bad:
        raise UnknownStrategyError(
            f"Feature {feature_name!r} names unknown stage(s) {bad}; stages are {one_of(FEATURE_STAGES)} "
            "(on a ladder also '<model>_direct', e.g. 'mid_direct')."
        )
    return stages


def strategy_order(strategy_id: str) -> tuple:
    """Sort key of the canonical order: every direct (cheapest model first), every reasoning, then transfers by target,
    source and K (`_all` last). For a pair: small_direct, large_direct, small_reason, large_reason, transfer_<K> by
    increasing K, transfer_all."""
    s = parse_strategy(strategy_id)
    if s.mode == "direct":
        return (0, alias_rank(s.model), 0, 0)
    if s.mode == "reason":
        return (1, alias_rank(s.model), 0, 0)
    return (2, alias_rank(s.model), alias_rank(s.source), s.keep_tokens if s.keep_tokens is not None else math.inf)


def keep_tokens_of(strategy_id: str) -> int | None:
    """K for a transfer of K kept tokens; None for every other strategy, including `..._all` transfers."""
    return parse_strategy(strategy_id).keep_tokens
