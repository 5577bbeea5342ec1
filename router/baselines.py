"""The router types with nothing to train and no model files (`fixed`, `mutual-verification`): the fixed baselines.

Their P(correct) is 1.0 for the strategy the rule picks and 0.0 for the others, so the shared decision
rule (tau in (0, 1]) reproduces the rule exactly; mutual verification's agreement test is `decision_rules.agreement`,
the one the `mutual-verification` rule and `inference.MutualVerification` use.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from routedvlm.errors import RouterError, one_of
from .base import Router
from .decision_rules import AGREE_FEATURE, agreement, agrees
from .policy import Policy
from .strategies import LARGE, LARGE_DIRECT, SMALL, SMALL_DIRECT, ladder_aliases, parse_strategy, transfer_id

MV_CHECKS = (SMALL_DIRECT,)
DEFAULT_MV_KEEP_TOKENS = 64


def smallest_ladder(aliases) -> list[str]:
    """The shortest ladder that has every alias in `aliases`: the pair for small/large, three models for `mid`,
    `mid<i>`'s ladder of at least i + 2 models (and 4: `mid1` needs four)."""
    mids = [a for a in aliases if a not in (SMALL, LARGE)]
    if not mids:
        return list(ladder_aliases(2))
    if "mid" in mids:
        return list(ladder_aliases(3))
    return list(ladder_aliases(max(4, *(int(a[3:]) + 2 for a in mids))))


class FixedRouter(Router):
    """Always the same strategy (a baseline, or `RoutedVLM(router="large_reason")`, `"mid_direct"` on a ladder: its
    policy's ladder is the smallest that has the strategy's models)."""

    bounded_decision = True  # a fixed rule: no model

    def __init__(self, strategy: str | None = None, *, policy: Policy | None = None):
        if policy is None:
            if strategy is None:
                raise RouterError("FixedRouter needs a `strategy` such as 'large_direct'. Got None.")
            strat = parse_strategy(strategy)
            s = strat.id
            policy = Policy(router_type="fixed", strategies=[s], mode="one-shot", fallback=s, params={"strategy": s},
                            ladder=smallest_ladder(strat.models))
        self.strategy = policy.params.get("strategy", policy.fallback)
        if policy.strategies != [self.strategy]:
            raise RouterError(f"A fixed policy has exactly one strategy. Got {policy.strategies}.")
        super().__init__(policy)

    def predict_proba(self, features):
        import pandas as pd

        return pd.DataFrame({self.strategy: np.ones(len(features))}, index=features.index)

    def _proba_row(self, row: dict) -> dict[str, float]:
        return {self.strategy: 1.0}

    @classmethod
    def _from_folder(cls, policy: Policy, directory: Path) -> "FixedRouter":
        return cls(policy=policy)


class MutualVerificationRouter(Router):
    """The published rule: accept `large_direct` when it agrees with `check` (small_direct), else
    `transfer_<keep_tokens>` (keep_tokens=None: transfer_all). Mode cascade; both direct stages are paid."""

    bounded_decision = True  # a fixed rule: no model

    def __init__(self, keep_tokens: int | None = DEFAULT_MV_KEEP_TOKENS, check: str = SMALL_DIRECT, *,
                 policy: Policy | None = None):
        if policy is None:
            if check not in MV_CHECKS:
                raise RouterError(f"The `check` of mutual verification must be {one_of(MV_CHECKS)}. Got {check!r}.")
            if keep_tokens is not None and (not isinstance(keep_tokens, int) or keep_tokens <= 0):
                raise RouterError(f"`keep_tokens` must be a positive integer or None (all). Got {keep_tokens!r}.")
            escalate = transfer_id(keep_tokens)
            policy = Policy(
                router_type="mutual-verification", strategies=[LARGE_DIRECT, escalate], mode="cascade",
                paid_stages=[LARGE_DIRECT, SMALL_DIRECT], features=[AGREE_FEATURE], tau=0.5, fallback=escalate,
                params={"keep_tokens": keep_tokens, "check": check},
            )
        self.escalate = policy.fallback
        if policy.features != [AGREE_FEATURE] or sorted(policy.strategies) != sorted([LARGE_DIRECT, self.escalate]):
            raise RouterError(
                f"A mutual-verification policy uses feature [{AGREE_FEATURE!r}] and strategies "
                f"['large_direct', <transfer>]. Got features {policy.features}, strategies {policy.strategies}."
            )
        super().__init__(policy)

    def predict_proba(self, features):
        import pandas as pd

        agree = agreement(features[AGREE_FEATURE].to_numpy(dtype=float))
        return pd.DataFrame(
            {LARGE_DIRECT: agree.astype(float), self.escalate: (~agree).astype(float)}, index=features.index
        )[self.policy.strategies]

    def _proba_row(self, row: dict) -> dict[str, float]:
        agree = agrees(row[AGREE_FEATURE])
        return {LARGE_DIRECT: float(agree), self.escalate: float(not agree)}

    @classmethod
    def _from_folder(cls, policy: Policy, directory: Path) -> "MutualVerificationRouter":
        return cls(policy=policy)


RULES = {"mutual-verification": MutualVerificationRouter}


def make_rule_router(name_or_strategy_id: str, **kw) -> Router:
    """`mutual-verification` (kw: keep_tokens, check), or a strategy id for a FixedRouter."""
    if name_or_strategy_id in RULES:
        return RULES[name_or_strategy_id](**kw)
    try:
        parse_strategy(name_or_strategy_id)
    except Exception:
        raise RouterError(
            f"Unknown rule router {name_or_strategy_id!r}. Use {one_of(RULES)} or a strategy id such as "
            "'large_direct' or 'transfer_64'."
        ) from None
    return FixedRouter(name_or_strategy_id, **kw)
