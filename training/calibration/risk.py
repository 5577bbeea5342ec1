"""What a target certifies (training/calibration/certify.py's module docstring): the loss per row, its limit
`alpha`, the reference, and each member's p-value (ltt.py)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from routedvlm.errors import ConfigError
from routedvlm.router.decision_rules import fixed_rule
from routedvlm.router.strategies import strategy_order

from ..config import DIFFERENCE_TESTS, RELATIVE_LOSSES  # the loss of a relative target; the first is the default
from . import ltt
from .rule_family import Member

METHOD = "learn-then-test: exact binomial p-values, fixed-sequence testing per rule chain, Bonferroni over chains"
METHODS = {"clopper-pearson": "learn-then-test: accuracy difference, Clopper-Pearson upper bound on P(reference right, "
                              "chosen wrong) minus lower bound on P(reference wrong, chosen right) at delta/2 each, "
                              "fixed-sequence testing per rule chain, Bonferroni over chains",
           "betting": "learn-then-test: accuracy difference, Waudby-Smith-Ramdas betting p-values (loss in [-1, 1]), "
                      "fixed-sequence testing per rule chain, Bonferroni over chains"}


@dataclass
class RiskSpec:
    """What is certified: `kind` 'difference' or 'regret' (vs `reference`), 'error', or 'none' (latency budgets), at
    limit `alpha`; `test`: the difference's p-value (DIFFERENCE_TESTS)."""

    kind: str
    alpha: float | None
    reference: str
    reference_train_accuracy: float
    test: str = DIFFERENCE_TESTS[0]

    @property
    def relative(self) -> bool:
        return self.kind in RELATIVE_LOSSES

    def losses(self, df: pd.DataFrame, correct: np.ndarray) -> np.ndarray:
        """The loss per row: bool (0/1 losses), or int8 in {-1, 0, 1} for the difference."""
        correct = np.asarray(correct, dtype=bool)
        if self.relative:
            ref = df[f"correct__{self.reference}"].to_numpy(dtype=bool)
            if self.kind == "regret":
                return ref & ~correct
            return (ref & ~correct).astype(np.int8) - (~ref & correct).astype(np.int8)
        return ~correct

    def p_values(self, losses: np.ndarray, level: float) -> np.ndarray:
        """The p-value of "risk > alpha" of each member (rows of `losses`, [members, n]), tested at `level`."""
        n = losses.shape[-1]
        if self.kind != "difference":
            return np.asarray(ltt.binomial_p_value(losses.sum(axis=-1), n, self.alpha), dtype=float)
        if self.test == "betting":
            return ltt.betting_p_value(losses[:, ltt.shuffled(n)], self.alpha, -1.0, 1.0, level)
        return ltt.difference_p_value((losses > 0).sum(axis=-1), (losses < 0).sum(axis=-1), n, self.alpha)

    @property
    def method(self) -> str:
        return METHODS[self.test] if self.kind == "difference" else METHOD

    @property
    def loss_text(self) -> str:
        r = self.reference
        if self.kind == "difference":
            return f"accuracy difference vs {r}: +1[{r} right and chosen wrong] - 1[{r} wrong and chosen right]"
        if self.kind == "regret":
            return f"regret vs {r}: 1[{r} right and chosen wrong]"
        return "error: 1[chosen wrong]" if self.kind == "error" else "none (latency budgets are not certified)"

    def is_trivial(self, member: Member) -> bool:
        """'Always the reference' under a relative loss: loss 0 on every row, by construction."""
        return self.relative and member.rule == fixed_rule(self.reference)


def risk_spec(target: dict, train: pd.DataFrame, candidates, reference: str | None = None) -> RiskSpec:
    """The certified loss and its limit for `target` (module docstring); the reference comes from `train` (or is
    `reference`, a labelled strategy that need not be a candidate: a sub-pair certified against the ladder's)."""
    accs = {s: float(train[f"correct__{s}"].mean()) for s in [*candidates, *([reference] if reference else [])]}
    ref = reference or max(sorted(candidates, key=strategy_order, reverse=True), key=lambda s: accs[s])  # ties: costlier
    kind, value = target["kind"], float(target["value"])
    if kind == "accuracy":
        loss, test = target.get("loss", RELATIVE_LOSSES[0]), target.get("test", DIFFERENCE_TESTS[0])
        if loss not in RELATIVE_LOSSES or test not in DIFFERENCE_TESTS:
            raise ConfigError(f"An accuracy target's `loss` must be one of {', '.join(RELATIVE_LOSSES)} and its `test` "
                              f"one of {', '.join(DIFFERENCE_TESTS)}. Got {loss!r} and {test!r} instead.")
        return RiskSpec(loss, (1.0 - value) * accs[ref], ref, accs[ref], test)
    if kind == "min_accuracy":
        return RiskSpec("error", 1.0 - value, ref, accs[ref])
    return RiskSpec("none", None, ref, accs[ref])
