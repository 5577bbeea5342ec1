"""The members of the decision-rule family a router can express, as chains for fixed-sequence testing.

Each chain is ordered conservative -> aggressive and fixed before any calibration row is seen (training/calibration/certify.py):
- `tau`: the tau-rule at tau = 1, 0.995, ..., 0 (`TAU_GRID`), in the router's mode;
- `lagrangian`: argmax P - lambda * cost at lambda * c_max = 0, then 1e-3 ... 10 geometrically (`LAMBDA_GRID`;
  c_max = the largest expected cost), in the router's mode;
- `binary`: accept `large_direct` when P(large_direct) >= theta, else `large_reason` (the fallback when
  large_reason is not labelled), theta = 1 ... 0, in the router's mode (a cascade pays large_direct first); on a
  ladder the accepted answer is the most expensive paid direct answer (`<m>_direct` of the climb's top);
- `baselines`: the members without a parameter or a model: mutual verification at every candidate K (cascade,
  both direct stages paid; the direct answers must be labelled) and every candidate strategy alone (one-shot),
  ordered by their loss on the training rows (an honest estimate: they use no model), lowest first. On a ladder
  mutual verification runs between every two models a < b whose transfers a->b are candidates (accept `b_direct`
  when it agrees with `a_direct`, else `transfer_<a>_<b>_<K>`).
Works for any router that gives P(correct) per candidate strategy per row (`Router.predict_proba`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from routedvlm.router.decision_rules import (agree_feature, apply_rule_arrays, binary_rule, describe, fixed_rule,
                                              lagrangian_rule, mutual_verification_rule, rule_features, rule_stages,
                                              tau_rule, uses_model)
from routedvlm.router.ladder import paid_order
from routedvlm.router.strategies import LARGE_DIRECT, LARGE_REASON, alias_rank, parse_strategy

from ..costs import Outcomes, label_strategies

TAU_GRID = np.round(np.linspace(1.0, 0.0, 201), 6)
THETA_GRID = TAU_GRID
LAMBDA_GRID = np.concatenate([[0.0], np.geomspace(1e-3, 10.0, 121)])  # x c_max: lambda in accuracy per ms
CHAINS = ("tau", "lagrangian", "binary", "baselines")


@dataclass(frozen=True)
class Member:
    """One rule of the family with the mode it runs in."""

    rule: dict
    chain: str
    mode: str
    paid_stages: tuple

    @property
    def name(self) -> str:
        return describe(self.rule)

    def to_dict(self) -> dict:
        return {"rule": dict(self.rule), "chain": self.chain, "mode": self.mode, "paid_stages": list(self.paid_stages),
                "name": self.name}


def model_chains(policy, present: list[str], mode: str | None = None, paid=None) -> dict[str, list[Member]]:
    """The tau, lagrangian and binary chains of a router with `policy` (in `mode` with `paid` stages, default the
    policy's), given the strategies the labels hold."""
    mode, paid = mode or policy.mode, tuple(policy.paid_stages if paid is None else paid)
    c_max = max([float(v) for v in policy.expected_cost_ms.values()] + [1e-9])
    out = {"tau": [Member(tau_rule(t), "tau", mode, paid) for t in TAU_GRID],
           "lagrangian": [Member(lagrangian_rule(x / c_max), "lagrangian", mode, paid) for x in LAMBDA_GRID]}
    accept = binary_accept(policy.strategies, paid)
    top_reason = f"{parse_strategy(accept).model}_reason"  # large_reason on the pair
    escalate = top_reason if top_reason in present and top_reason in policy.strategies else (
        LARGE_REASON if LARGE_REASON in present and accept == LARGE_DIRECT else policy.fallback)
    if accept in policy.strategies and escalate != accept:
        out["binary"] = [Member(binary_rule(t, escalate, accept), "binary", mode, paid) for t in THETA_GRID]
    return out


def binary_accept(strategies, paid) -> str:
    """The answer the binary rule accepts: `large_direct`, or on a climb that does not pay it the most expensive paid
    direct answer among the candidates."""
    top = [s for s in sorted(paid, key=lambda s: alias_rank(s[: -len("_direct")])) if s in strategies]
    return top[-1] if top and LARGE_DIRECT not in paid else LARGE_DIRECT if LARGE_DIRECT in strategies else (
        top[-1] if top else LARGE_DIRECT)


def baseline_members(df: pd.DataFrame, candidates=None) -> list[Member]:
    """Mutual verification at every K of the labels (when both direct answers are labelled) and every single
    strategy (one-shot), unordered; only strategies among `candidates` (default: every labelled one) are used."""
    labelled = label_strategies(df)
    present = [s for s in labelled if candidates is None or s in candidates]
    ladder = ladder_of_strategies(labelled)
    out = []
    for s in present:
        st = parse_strategy(s)
        if st.is_transfer and {f"{st.source}_direct", f"{st.model}_direct"} <= set(present):
            rule = mutual_verification_rule(st.keep_tokens, st.source, st.model)
            out.append(Member(rule, "baselines", "cascade", tuple(paid_order(rule_stages(rule), ladder))))
    out += [Member(fixed_rule(s), "baselines", "one-shot", ()) for s in present]
    return out


def ladder_of_strategies(strategies) -> tuple[str, ...]:
    """The aliases the strategies run (at least small and large), cheapest first."""
    found = {a for s in strategies for a in parse_strategy(s).models} | {"small", "large"}
    return tuple(sorted(found, key=alias_rank))


def with_agreement(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with the agreement feature of every two labelled direct answers, computed from the answers when the
    labels lack it."""
    directs = [s for s in label_strategies(df) if parse_strategy(s).mode == "direct" and f"answer__{s}" in df.columns]
    directs.sort(key=lambda s: alias_rank(parse_strategy(s).model))
    norm = lambda c: df[c].astype(str).str.strip().str.lower().to_numpy()  # noqa: E731
    add = {}
    for i, b in enumerate(directs):
        for a in directs[:i]:
            name = agree_feature(parse_strategy(a).model, parse_strategy(b).model)
            if name not in df.columns:
                add[name] = (norm(f"answer__{b}") == norm(f"answer__{a}")).astype(float)
    return df.assign(**add) if add else df


class Scorer:
    """(correct, latency, chosen) of any member on the rows of `df`, with P(correct) computed once (`proba`).
    `model_cost_ms` (per row, or a number) is added to the latency of members that read the model. `router` may
    be None when only members without a model are scored."""

    def __init__(self, router, df: pd.DataFrame, proba: pd.DataFrame | None = None, model_cost_ms=0.0):
        self.router, self.df = router, with_agreement(df)
        self.proba = proba
        self.model_cost_ms = model_cost_ms
        self.strategies = label_strategies(self.df)
        self._outcomes: dict = {}
        self._matrix = self._columns = None

    def _proba(self):
        if self.proba is None:
            self.proba = self.router.predict_proba(self.router._inputs(self.df))
        return self.proba

    def outcomes(self, mode: str, paid) -> Outcomes:
        key = (mode, tuple(paid))
        if key not in self._outcomes:
            self._outcomes[key] = Outcomes(self.df, self.strategies, mode, list(paid))
        return self._outcomes[key]

    def _arrays(self):
        """P(correct) in the router's cost order (the tau and lagrangian rules' matrix), and per column."""
        if self._matrix is None:
            order = self.router._cost_order()
            self._matrix = (self._proba()[order].to_numpy(dtype=float), order)
            self._columns = {s: self._proba()[s].to_numpy(dtype=float) for s in self._proba().columns}
        return self._matrix

    def chosen(self, rule: dict) -> np.ndarray:
        """The strategy `rule` picks on every row: the runtime's rule code (`apply_rule_arrays`) on cached arrays."""
        n = len(self.df)
        if not uses_model(rule):  # no model, no router needed (fixed rules and mutual verification)
            agree = (self.df[rule_features(rule)[0]].to_numpy(dtype=float) if rule["name"] == "mutual-verification"
                     else None)
            return apply_rule_arrays(rule, n, None, None, agree, [], {}, LARGE_REASON)
        matrix, order = self._arrays()
        accept = self._columns[rule["accept"]] if rule["name"] == "binary" else None
        p = self.router.policy
        return apply_rule_arrays(rule, n, matrix, accept, None, order, self.router._costs, p.fallback)

    def score(self, member: Member) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        model = uses_model(member.rule)
        chosen = self.chosen(member.rule)
        correct, latency = self.outcomes(member.mode, member.paid_stages).of(chosen)
        return correct, latency + (self.model_cost_ms if model else 0.0), chosen
