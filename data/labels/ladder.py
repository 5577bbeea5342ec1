"""The ladder part of the labels schema: which version a labels set follows (1: a pair; 2: a ladder of N >= 3
models, metadata `ladder` + `models` keyed by alias), the aliases it names, and the checks of its `ladder` metadata."""
from __future__ import annotations

import pandas as pd

from .schema import SCHEMA_VERSION, schema_version_for, strategies_in


def ladder_of(metadata: dict | None, df=None) -> tuple[str, ...]:
    """The model aliases of a labels set, cheapest first: the metadata's `ladder` (version 2), else the models its
    strategy columns run when `df` is given (at least small and large), else the pair."""
    from routedvlm.router.strategies import alias_rank, strategy_models

    ladder = (metadata or {}).get("ladder")
    if isinstance(ladder, list) and ladder:
        return tuple(ladder)
    found = set(strategy_models(strategies_in(df))) if df is not None else set()
    return tuple(sorted(found | {"small", "large"}, key=alias_rank))


def version_of(df, metadata) -> int:
    """The schema version a table follows: 2 for a ladder (metadata `ladder` of 3+, or strategies of other models)."""
    from routedvlm.router.strategies import strategy_models

    others = set(strategy_models(strategies_in(df))) - {"small", "large"} if isinstance(df, pd.DataFrame) else set()
    return SCHEMA_VERSION if others else schema_version_for(metadata)


def ladder_problems(df, meta: dict) -> list[str]:
    """A version-2 ladder: `ladder` is the aliases of N models, `models` keyed by them, the strategies its models'."""
    from routedvlm.router.strategies import ladder_aliases, strategy_models

    ladder = meta.get("ladder")
    if ladder is None:
        extra = sorted(set(strategy_models(strategies_in(df))) - {"small", "large"})
        return [f"strategies of models {extra} need metadata `ladder` (the model aliases, cheapest first)"] if extra else []
    if not isinstance(ladder, list) or not 2 <= len(ladder) <= 10 or ladder != list(ladder_aliases(len(ladder))):
        return [f"metadata ladder {ladder!r} must list the aliases of 2 to 10 models, cheapest first, e.g. "
                f"{list(ladder_aliases(3))}"]
    out = []
    models = meta.get("models")
    if isinstance(models, dict) and set(models) != set(ladder):
        out.append(f"metadata models are keyed {sorted(models)}, not by the ladder's aliases {ladder}")
    off = sorted(set(strategy_models(strategies_in(df))) - set(ladder))
    if off:
        out.append(f"strategy columns run models {off}, which are not on the metadata ladder {ladder}")
    return out
