"""The Router interface: one abstract scoring method (P(correct) per strategy) plus concrete decisions.

Subclasses implement `predict_proba` and, for their model files, `_save_files` / `_from_folder`.
The decision rule itself lives in `decision.py` and is shared by every router type.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from pathlib import Path

import numpy as np

from .decision import Decision, choose, choose_one, cost_order, keep_tokens_of
from .errors import RouterError
from .policy import Policy
from .strategies import feature_stages


class Router(ABC):
    """features -> P(correct) per candidate strategy -> Decision, under `self.policy`."""

    def __init__(self, policy: Policy):
        if not isinstance(policy, Policy):
            raise RouterError(f"A router needs a Policy. Got {type(policy).__name__}.")
        self.policy = policy
        self._order_key = None
        self._order = cost_order(policy.strategies, self._costs)  # fail early on bad costs

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
        """Stages that must run before deciding: `paid_stages` plus every stage a feature needs
        ('prompt' excluded: prompt features are free)."""
        stages = set(self.policy.paid_stages)
        for f in self.policy.features:
            stages.update(feature_stages(f))
        stages.discard("prompt")
        return stages

    def check_features(self, columns) -> None:
        missing = [f for f in self.policy.features if f not in columns]
        if missing:
            raise RouterError(
                f"The router needs feature(s) {missing}, missing from the input (given {sorted(map(str, columns))}). "
                f"Compute them with the features module for stages {sorted(self.required_stages)}."
            )

    def decide(self, features: dict) -> Decision:
        """The decision for one sample; `features` maps feature names to numbers (extra keys ignored)."""
        if not isinstance(features, dict):
            raise RouterError(f"decide() takes a dict of features. Got {type(features).__name__}; use decide_batch for a DataFrame.")
        self.check_features(features)
        p = self._proba_row(features)
        strategy, reason = choose_one(p, self._cost_order(), self.policy.tau, self.policy.fallback)
        return Decision(strategy, keep_tokens_of(strategy), p, reason)

    def _inputs(self, df):
        """The columns of `df` that `predict_proba` reads: the policy's features (a probe router adds the
        sample's image and question)."""
        return df[self.policy.features]

    def decide_batch(self, df) -> list[Decision]:
        self.check_features(df.columns)
        proba = self.predict_proba(self._inputs(df))
        chosen = choose(proba, self._costs, self.policy.tau, self.policy.fallback)
        records = proba.to_dict(orient="records")
        out = []
        for strategy, p in zip(chosen, records):
            p = {s: float(v) for s, v in p.items()}
            accepted = any(v >= self.policy.tau for v in p.values() if not math.isnan(v))
            out.append(Decision(str(strategy), keep_tokens_of(strategy), p, "p>=tau" if accepted else "fallback"))
        return out

    def decide_with_tau(self, df, tau: float) -> np.ndarray:
        """Chosen strategy ids for every row at threshold `tau` (for calibration sweeps)."""
        self.check_features(df.columns)
        return choose(self.predict_proba(self._inputs(df)), self._costs, tau, self.policy.fallback)

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
        from .load import load_folder

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
        return f"{type(self).__name__}(type={p.router_type!r}, mode={p.mode!r}, strategies={p.strategies}, tau={p.tau:g})"
