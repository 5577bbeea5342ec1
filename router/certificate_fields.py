"""The optional fields of a router's certificate checked against their meaning (policy.py calls it when it
validates a policy): what the live audit promises (`risk_limit`) and runs (`reference`), and the test's numbers."""
from __future__ import annotations

import math


from .strategies import is_strategy, parse_strategy


def _unit(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and 0 <= v <= 1



def certificate_field_problems(c: dict, ladder) -> list[str]:
    """The optional certificate fields against their meaning: `risk_limit` (the promised rate) and `p_value` in
    [0, 1], `reference` a strategy of this router's ladder (the live audit runs it)."""
    out = []
    limit = c.get("risk_limit")
    if limit is not None and not _unit(limit):
        out.append(f"`certificate['risk_limit']` (the promised error or regret rate) must be a number in [0, 1]. "
                   f"Got {limit!r}.")
    p_value = c.get("p_value")  # (`risk_observed` may be a difference of rates, negative: not checked here)
    if p_value is not None and not _unit(p_value):
        out.append(f"`certificate['p_value']` must be None or a number in [0, 1]. Got {p_value!r}.")
    ref = c.get("reference")
    if ref is not None:
        if not is_strategy(ref):
            out.append(f"`certificate['reference']` must be a strategy id of the router's ladder (the live audit runs "
                       f"it), such as 'large_reason'. Got {_short_text(ref)}.")
        elif not set(parse_strategy(ref).models) <= set(ladder):
            out.append(f"`certificate['reference']` {ref!r} runs models outside the ladder {list(ladder)}.")
    return out


def _short_text(v) -> str:
    text = repr(v)
    return text if len(text) <= 80 else text[:80] + "...'"
