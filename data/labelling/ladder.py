"""The ladder settings of a labelling run: `--model`/`--models` (N >= 2 models, cheapest first), per-model
`--reasoner ALIAS=SPEC` and `--cost-model ALIAS=NAME`, and the bounded strategy grid (`--transfer-pairs`,
`--reason-models`, `--k-grid`). Whatever flags named the models, the run reads them from one `Ladder` (a pair is a
ladder of two). A ladder of two is recorded as the pair's `small`/`large` settings, so its runs, resumes and labels
are the two-model version's."""
from __future__ import annotations

from dataclasses import dataclass

from routedvlm.errors import ConfigError, UnknownStrategyError, one_of
from routedvlm.router.strategies import MAX_LADDER, alias_rank, ladder_aliases, ladder_strategies


def _items(value) -> list[str]:
    """A list of non-empty strings from a tuple/list or a comma-separated string."""
    if value is None:
        return []
    raw = value.split(",") if isinstance(value, str) else [x for v in value for x in str(v).split(",")]
    return [str(v).strip() for v in raw if str(v).strip()]


def parse_assignments(values, name: str, aliases) -> dict:
    """{alias: value} from 'ALIAS=VALUE' items (`--reasoner mid=...`); ConfigError naming the ladder's aliases."""
    out = {}
    for item in ([values] if isinstance(values, str) else list(values or ())):
        alias, sep, value = str(item).partition("=")
        alias, value = alias.strip(), value.strip()
        if not sep or not value:
            raise ConfigError(f"The `{name}` setting takes ALIAS=VALUE items such as 'mid=path/to/checkpoint'. Got "
                              f"{item!r} instead.")
        if alias not in aliases:
            raise ConfigError(f"The `{name}` setting names model {alias!r}, which is not on the ladder; its models are "
                              f"{one_of(aliases)}.")
        out[alias] = value
    return out


@dataclass(frozen=True)
class Ladder:
    """The models of a run, cheapest first (a pair is a ladder of two): `specs` {alias: model spec}, and for the
    aliases that have one, `reasoners` {alias: reasoner spec} and `cost_models` {alias: profiled model name}."""

    specs: dict
    reasoners: dict
    cost_models: dict

    @property
    def aliases(self) -> tuple:
        return tuple(self.specs)

    def __len__(self) -> int:
        return len(self.specs)


def resolve_ladder(cfg) -> Ladder:
    """The run's `Ladder`, after normalising the recorded settings in place: `models` (N >= 3) with `small`/`large`
    set to its ends, or a pair in `small`/`large` (a two-model `--models` becomes `--small/--large`, its ALIAS=...
    items the per-side flags)."""
    _normalise(cfg)
    aliases = ladder_aliases(len(cfg.models)) if cfg.models else ("small", "large")
    specs = dict(zip(aliases, cfg.models)) if cfg.models else {"small": cfg.small, "large": cfg.large}
    named = {}
    for field, single in (("reasoners", "{}_reasoner"), ("cost_models", "cost_model_{}")):
        given = {end: getattr(cfg, single.format(end)) for end in ("small", "large")}
        given.update(parse_assignments(getattr(cfg, field), field, aliases))
        named[field] = {a: given[a] for a in aliases if given.get(a)}
    return Ladder(specs, named["reasoners"], named["cost_models"])


def _normalise(cfg) -> None:
    """resolve_ladder's in-place part: the recorded settings of a pair or a ladder (module docstring)."""
    models = _items(cfg.models) if cfg.models is not None else None
    if models is None:
        cfg.models = None
        if not cfg.small or not cfg.large:
            raise ConfigError("Name the models to label: --small A --large B (a pair), or a ladder, cheapest first: "
                              "--model A --model B --model C (or --models A,B,C). Got "
                              f"small={cfg.small!r}, large={cfg.large!r}.")
        _check_no_ladder_only(cfg)
        return
    resolved = len(models) > 2 and (cfg.small, cfg.large) == (models[0], models[-1])  # a resolved config's fields
    if (cfg.small is not None or cfg.large is not None) and not resolved:
        raise ConfigError("Pass the models either as --small/--large (a pair) or as a ladder (--model ... / --models "
                          "A,B,C), not both.")
    if not 2 <= len(models) <= MAX_LADDER:
        raise ConfigError(f"The `models` setting must list 2 to {MAX_LADDER} models, cheapest first. Got "
                          f"{len(models)}: {models}.")
    aliases = ladder_aliases(len(models))
    cfg.small, cfg.large = models[0], models[-1]
    if len(models) > 2:
        cfg.models = tuple(models)
        parse_assignments(cfg.cost_models, "cost_models", aliases)
        reasoners = parse_assignments(cfg.reasoners, "reasoners", aliases)
        for end in ("small", "large"):
            if getattr(cfg, f"{end}_reasoner") and end in reasoners:
                raise ConfigError(f"The reasoner of {end!r} is given twice (--{end}-reasoner and --reasoner {end}=...); "
                                  "pass it once.")
        return
    cfg.models = None  # two models: the pair
    for field, single in (("reasoners", "{}_reasoner"), ("cost_models", "cost_model_{}")):
        for alias, value in parse_assignments(getattr(cfg, field), field, aliases).items():
            if getattr(cfg, single.format(alias)):
                raise ConfigError(f"The {field[:-1].replace('_', ' ')} of {alias!r} is given twice; pass it once.")
            setattr(cfg, single.format(alias), value)
        setattr(cfg, field, None)


def _check_no_ladder_only(cfg) -> None:
    """A pair given as --small/--large: ALIAS=... items may name small or large only."""
    for field, single in (("reasoners", "{}_reasoner"), ("cost_models", "cost_model_{}")):
        values = getattr(cfg, field)
        if values is None:
            continue
        for alias, value in parse_assignments(values, field, ("small", "large")).items():
            if getattr(cfg, single.format(alias)):
                raise ConfigError(f"The {field[:-1].replace('_', ' ')} of {alias!r} is given twice; pass it once.")
            setattr(cfg, single.format(alias), value)
        setattr(cfg, field, None)


def parse_pairs(value, aliases) -> list[tuple[str, str]] | None:
    """'small:mid,mid:large' -> [('small', 'mid'), ('mid', 'large')]; None -> None (every pair); 'none' -> []."""
    if value is None:
        return None
    items = _items(value)
    if items == ["none"]:
        return []
    pairs = []
    for item in items:
        src, sep, dst = item.partition(":")
        if not sep or src not in aliases or dst not in aliases or alias_rank(src) >= alias_rank(dst):
            raise ConfigError(f"The `transfer_pairs` setting takes FROM:TO pairs of the ladder's models "
                              f"{one_of(aliases)}, FROM cheaper than TO, e.g. '{aliases[0]}:{aliases[-1]}'. Got "
                              f"{item!r} instead.")
        pairs.append((src, dst))
    return list(dict.fromkeys(pairs))


def parse_reason_models(value, aliases) -> tuple[str, ...]:
    """'small,mid' -> ('small', 'mid'); None -> every model; 'none' -> ()."""
    if value is None:
        return tuple(aliases)
    items = _items(value)
    if items == ["none"]:
        return ()
    bad = [m for m in items if m not in aliases]
    if bad:
        raise ConfigError(f"The `reason_models` setting names {bad}, not models of the ladder {one_of(aliases)} "
                          "(or 'none').")
    return tuple(m for m in aliases if m in items)


def bounded_grid(cfg, k_grid) -> list[str]:
    """The strategy ids of a run: every direct, `<m>_reason` of `--reason-models`, and per `--transfer-pairs` pair one
    transfer per K plus `_all`; canonical order."""
    aliases = cfg.aliases
    pairs = parse_pairs(cfg.transfer_pairs, aliases)
    reasons = parse_reason_models(cfg.reason_models, aliases)
    try:
        ids = ladder_strategies(aliases, k_grid, pairs)
    except UnknownStrategyError as exc:
        raise ConfigError(str(exc)) from None
    return [s for s in ids if not (s.endswith("_reason") and s[: -len("_reason")] not in reasons)]
