"""A cascade climbs the ladder: the stages a policy pays before deciding, in the order they run, and `next_action`,
the one step RoutedVLM asks for on each request (what to run next, given what it has already paid).

A policy in mode `cascade` pays `<m>_direct` for the models its features (and its rule) need, cheapest first (the
pair keeps its order: `large_direct`, then `small_direct`), then decides once: accept one of the paid answers, or
escalate to any other strategy (a transfer `a->b` whose `b_direct` was paid continues `b`'s cached prefix; every
other strategy runs on its own). A `one-shot` policy pays nothing and decides on the prompt features. The cost model
that prices these steps is training/costs.py; a router's `decide()` stays the one-request decision for the pair and
the ladder alike.
"""
from __future__ import annotations

from dataclasses import dataclass

from routedvlm.errors import RouterError
from .decision_rules import Decision
from routedvlm.errors import UnknownStrategyError
from .strategies import LARGE, SMALL, alias_rank, check_ladder, is_alias, parse_strategy

PAIR = (SMALL, LARGE)


def ladder_problems(ladder, format_version) -> list[str]:
    """policy.json's `ladder`: the position names of a ladder; a longer ladder than the pair needs format 3."""
    if not isinstance(ladder, list) or not all(isinstance(a, str) for a in ladder):
        return [f"`ladder` must be a list of model aliases such as ['small', 'mid', 'large']. Got {ladder!r}."]
    try:
        check_ladder(ladder)
    except UnknownStrategyError as exc:
        return [f"`ladder`: {exc}"]
    if tuple(ladder) != PAIR and isinstance(format_version, int) and format_version < 3:
        return [f"`ladder` {ladder} needs format_version 3 or later (files of version {format_version} are a "
                "pair). Re-export the router with train-router."]
    return []


def off_ladder_problems(ladder, strategies, fallback, is_strategy) -> list[str]:
    """Strategies (and the fallback) that run a model the ladder does not have."""
    out = []
    for name, ids in (("strategies", strategies), ("fallback", [fallback])):
        off = [s for s in ids if is_strategy(s) and set(parse_strategy(s).models) - set(ladder)]
        if off:
            out.append(f"`{name}` holds {off}, which run(s) a model not on the ladder {ladder}; add the model to "
                       "`ladder` or drop the strategy.")
    return out


def paid_stage_problems(ladder, paid_stages, pair_shapes) -> list[str]:
    """`paid_stages` against the ladder: one of the pair's shapes, or distinct ladder direct stages cheapest first."""
    if not isinstance(ladder, list) or tuple(ladder) == PAIR:
        if tuple(paid_stages) not in pair_shapes:
            return [f"`paid_stages` must be one of {[list(p) for p in pair_shapes]}. Got {paid_stages!r}."]
        return []
    stages = [f"{a}_direct" for a in ladder if is_alias(a)]
    if [s for s in paid_stages if s not in stages] or paid_order(paid_stages, ladder) != list(paid_stages):
        return [f"`paid_stages` of a ladder must list distinct direct stages of its models, cheapest first "
                f"(from {stages}). Got {paid_stages!r}."]
    return []


def _alias(stage: str) -> str:
    return stage[: -len("_direct")]


def paid_order(stages, ladder=PAIR) -> list[str]:
    """`stages` (direct stages) in the order a policy on `ladder` pays them: on the pair `large_direct` first, then
    `small_direct` (the paper's shape, policy.json's pair shapes); on a longer ladder cheapest first (it climbs)."""
    stages = list(dict.fromkeys(s for s in stages if s != "prompt"))
    if tuple(ladder) == PAIR:
        return sorted(stages, key=lambda s: -alias_rank(_alias(s)))
    return sorted(stages, key=lambda s: alias_rank(_alias(s)))


def stages_to_pay(router) -> list[str]:
    """The direct stages `router`'s policy runs before its decision, in order: its `paid_stages` and every stage a
    decision feature or its rule needs (`Router.required_stages`)."""
    policy = router.policy
    return paid_order(router.required_stages | set(policy.paid_stages), policy.ladder)


@dataclass(frozen=True)
class Step:
    """What to run next on one request.

    `kind` "pay": run `stage` (a `<m>_direct`) and call `next_action` again with it paid. `kind` "answer": the decision
    is made; run `decision.strategy` unless `accept` (its answer is one of the paid stages' answers). `continues`: the
    chosen strategy is a transfer whose answerer's direct pass was paid, so it continues that model's cached prefix
    (the two-stage escalation, priced by its escalate column)."""

    kind: str
    stage: str | None = None
    decision: Decision | None = None
    accept: bool = False
    continues: bool = False

    @property
    def strategy(self) -> str | None:
        return self.decision.strategy if self.decision is not None else self.stage


def next_action(router, features: dict, paid=()) -> Step:
    """The next step of `router`'s policy on one request: the next unpaid stage (cheapest first on a ladder), or, once
    every stage the policy needs has run, its decision (`router.decide(features)`); `features` must then hold every
    decision feature (and what `runtime_inputs` adds), `paid` names the stages that ran."""
    paid = list(paid or ())
    unknown = [s for s in paid if not isinstance(s, str)]
    if unknown:
        raise RouterError(f"`paid` must name stages such as 'small_direct'. Got {paid!r}.")
    todo = [s for s in stages_to_pay(router) if s not in paid]
    if todo:
        return Step("pay", stage=todo[0])
    decision = router.decide(features)
    st = parse_strategy(decision.strategy)
    return Step("answer", decision=decision, accept=st.id in paid,
                continues=st.is_transfer and f"{st.model}_direct" in paid)
