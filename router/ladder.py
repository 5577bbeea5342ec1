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
from .strategies import LARGE, SMALL, alias_rank, parse_strategy

PAIR = (SMALL, LARGE)


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
