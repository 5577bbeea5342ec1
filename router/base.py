"""The Router interface: one abstract scoring method (P(correct) per strategy) plus concrete decisions.

Subclasses implement `predict_proba` and, for their model files, `_save_files` / `_from_folder`.
The decision rules live in `decision_rules.py` (the policy's `rule`) and are shared by every router type.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from operator import itemgetter
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

from routedvlm.errors import RouterError
from .decision_rules import (Decision, apply_rule, apply_rule_one, cost_order, describe, keep_tokens_of, tau_rule,
                             uses_model)
from .policy import Policy
from .strategies import feature_stages


class DecisionPlan(NamedTuple):
    """What `decide()` reads of the policy, prepared once (Router._decision_plan)."""

    rule: dict
    uses_model: bool
    needed: frozenset  # the decision features
    order: list  # candidates by cost, then canonical order
    costs: dict
    fallback: str
    values: Callable  # {feature: value} -> the model features' values, in policy order (a tuple)


def _values_getter(names: list[str]) -> Callable:
    if len(names) == 1:
        name = names[0]
        return lambda row: (row[name],)
    return itemgetter(*names) if names else (lambda row: ())


class Router(ABC):
    """features -> P(correct) per candidate strategy -> Decision, under `self.policy`.

    `bounded_decision` (class attribute): whether `decide()` provably returns in a time bounded by the router's own
    size, with no model call, I/O or lock held elsewhere (a fixed rule; LightGBM trees checked to be trees at load).
    RoutedVLM runs such a decision in the request's thread; any other runs under its decision deadline."""

    bounded_decision = False

    def __init__(self, policy: Policy):
        if not isinstance(policy, Policy):
            raise RouterError(f"A router needs a Policy. Got {type(policy).__name__}.")
        self.policy = policy
        self._order_key = None
        self._order = cost_order(policy.strategies, self._costs)  # fail early on bad costs
        self._plan_key, self._plan = None, None

    @property
    def _costs(self) -> dict[str, float]:
        """The decision rule's costs (all 0 when the policy has none: canonical order decides)."""
        p = self.policy
        return p.expected_cost_ms or {s: 0.0 for s in p.strategies}

    def _cost_order(self) -> list[str]:
        """Candidates by cost then canonical order, recomputed only when the policy changed."""
        key = (tuple(self.policy.strategies), tuple(self.policy.expected_cost_ms.items()))
        if key != self._order_key:
            self._order, self._order_key = cost_order(self.policy.strategies, self._costs), key
        return self._order

    def _decision_plan(self) -> DecisionPlan:
        """The policy as `decide()` reads it, rebuilt only when a field it depends on changed: the fields are compared
        by value with copies taken when it was built (a policy edited in place is seen), a few C-level comparisons."""
        p, built = self.policy, getattr(self, "_plan_key", None)  # None too for a subclass that skipped __init__
        if (p.tau, p.fallback, p.rule, p.expected_cost_ms, p.strategies, p.features) != built:
            key = (p.tau, p.fallback, dict(p.rule), dict(p.expected_cost_ms), list(p.strategies), list(p.features))
            rule = p.decision_rule
            self._plan = DecisionPlan(rule, uses_model(rule), frozenset(p.decision_features), list(self._cost_order()),
                                      dict(self._costs), p.fallback, _values_getter(list(p.features)))
            self._plan_key = key
        return self._plan

    # ---- scoring ----
    @abstractmethod
    def predict_proba(self, features):
        """DataFrame (index = rows of `features`, columns = policy.strategies) of P(correct)."""

    def _proba_row(self, row: dict) -> dict[str, float]:
        """P(correct) for one row given as {feature: value}; subclasses may override with a faster path."""
        import pandas as pd

        frame = pd.DataFrame([{f: row[f] for f in self.policy.features}], columns=self.policy.features)
        return {s: float(v) for s, v in self.predict_proba(frame).iloc[0].items()}

    # ---- decisions ----
    @property
    def required_stages(self) -> set[str]:
        """Stages that must run before deciding: `paid_stages` plus every stage a decision feature needs
        ('prompt' excluded: prompt features are free)."""
        stages = set(self.policy.paid_stages)
        for f in self.policy.decision_features:
            stages.update(feature_stages(f))
        stages.discard("prompt")
        return stages

    def check_features(self, columns, names=None) -> None:
        """RouterError unless `columns` hold every decision feature (or every one of `names`)."""
        names = self.policy.decision_features if names is None else names
        missing = [f for f in names if f not in columns]
        if missing:
            raise RouterError(
                f"The router needs feature(s) {missing}, missing from the input (given {sorted(map(str, columns))}). "
                f"Compute them with the features module for stages {sorted(self.required_stages)}."
            )

    def decide(self, features: dict) -> Decision:
        """The decision for one sample; `features` maps feature names to numbers (extra keys ignored)."""
        if not isinstance(features, dict):
            raise RouterError(f"decide() takes a dict of features. Got {type(features).__name__}; use decide_batch for a DataFrame.")
        plan = self._decision_plan()
        if not features.keys() >= plan.needed:
            self.check_features(features)  # names the missing ones
        p = self._proba_plan(features, plan) if plan.uses_model else {}
        strategy, reason = apply_rule_one(plan.rule, p, features, plan.order, plan.costs, plan.fallback)
        return Decision(strategy, keep_tokens_of(strategy), p, reason)

    def _proba_plan(self, row: dict, plan: DecisionPlan) -> dict[str, float]:
        """`_proba_row` for `decide()`, which has the plan at hand (a router type may read `plan.values`)."""
        return self._proba_row(row)

    def _inputs(self, df):
        """The columns of `df` that `predict_proba` reads: the policy's features (a probe router adds the
        sample's image and question)."""
        return df[self.policy.features]

    def decide_batch(self, df) -> list[Decision]:
        """One Decision per row of `df`, the same as `decide` on each row."""
        self.check_features(df.columns)
        rule = self.policy.decision_rule
        proba = self.predict_proba(self._inputs(df)) if uses_model(rule) else None
        chosen = apply_rule(rule, proba, df, self._cost_order(), self._costs, self.policy.fallback)
        records = proba.to_dict(orient="records") if proba is not None else [{}] * len(df)
        rows = df.to_dict(orient="records") if rule["name"] == "mutual-verification" else [{}] * len(df)
        out = []
        for strategy, p, row in zip(chosen, records, rows):
            p = {s: float(v) for s, v in p.items()}
            _, reason = apply_rule_one(rule, p, row, self._cost_order(), self._costs, self.policy.fallback)
            out.append(Decision(str(strategy), keep_tokens_of(strategy), p, reason))
        return out

    def choices(self, df, rule: dict | None = None, proba=None) -> np.ndarray:
        """Chosen strategy ids for every row under `rule` (default: the policy's); `proba` reuses a
        `predict_proba(df)` table (calibration sweeps score the rows once)."""
        rule = rule or self.policy.decision_rule
        if proba is None and uses_model(rule):
            self.check_features(df.columns, self.policy.features)
            proba = self.predict_proba(self._inputs(df))
        return apply_rule(rule, proba, df, self._cost_order(), self._costs, self.policy.fallback)

    def decide_with_tau(self, df, tau: float) -> np.ndarray:
        """Chosen strategy ids for every row under the tau-rule at `tau` (for tau sweeps)."""
        return self.choices(df, tau_rule(tau))

    # ---- run-time hooks: RoutedVLM and its policy runner call them on every router; the defaults do nothing ----
    @property
    def hidden_layers(self) -> list[int]:
        """Decoder layers of the large model whose outputs RoutedVLM must capture during `large_direct` (the
        self-probe reads them); default: none."""
        return []

    def attach(self, pipeline) -> None:
        """Check, once at load time, that `pipeline`'s models can give this router its inputs (RouterError if not);
        default: nothing to check."""

    def runtime_inputs(self, request, stages: dict, pipeline) -> dict:
        """Extra `decide()` inputs beside the features, read from the request and the stages that ran (e.g. the
        sample's image for the LoRA probe, a hidden-state vector for the self-probe); called only when the rule reads
        P(correct). Default: none."""
        return {}

    def trace_info(self) -> dict:
        """Keys added to the decision's trace record after `decide()` (e.g. the probe's own cost); default: none."""
        return {}

    # ---- persistence ----
    def save(self, directory) -> Path:
        """Write the model files, then policy.json with their sha256 digests, into `directory`; returns the folder."""
        from .integrity import digests

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self._save_files(directory)
        self.policy.model_sha256 = digests(directory, self.model_files(self.policy))
        self.policy.save(directory)
        return directory

    @classmethod
    def model_files(cls, policy: Policy) -> list[str]:
        """The model files (relative to the router folder) that `_from_folder` reads for `policy`; each is
        verified (inside the folder, sha256 as recorded) before it is parsed. Default: none."""
        return []

    @classmethod
    def _check_unverified(cls, directory: Path, files: list[str]) -> None:
        """Called before `_from_folder` with the model files a version-1 policy.json records no digest for:
        a router type whose parser can crash the process checks them safely here (default: nothing)."""

    def _save_files(self, directory: Path) -> None:
        """Write type-specific model files and record them in policy.params (default: none)."""

    @classmethod
    def load(cls, directory) -> "Router":
        """Load a router folder; on a subclass, the folder's router_type must be of that class."""
        from .folder import load_folder

        router = load_folder(directory)
        if not isinstance(router, cls):
            raise RouterError(
                f"{str(directory)!r} holds a {router.policy.router_type!r} router, not a {cls.__name__}. "
                "Use routedvlm.router.load_router to load any router type."
            )
        return router

    @classmethod
    def _from_folder(cls, policy: Policy, directory: Path) -> "Router":
        return cls(policy=policy)

    def __repr__(self) -> str:
        p = self.policy
        return f"{type(self).__name__}(type={p.router_type!r}, mode={p.mode!r}, strategies={p.strategies}, rule={describe(p.decision_rule)!r})"
