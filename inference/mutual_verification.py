"""The paper's mutual-verification rule as a ready policy: accept the large model's short answer when a
cheap check by the small model agrees, otherwise escalate with K kept reasoning tokens (two-stage decoding).

One agreement test (`answers.answers_agree`, the one the router's agreement feature uses) and one rule
(`decision_rules`' mutual-verification member), so this class, `RoutedVLM(router="mutual-verification")` and the
labels' `feat__large_direct+small_direct__agree` decide alike on the same answers.
"""
from __future__ import annotations

from dataclasses import dataclass

from routedvlm.errors import ConfigError, one_of
from routedvlm.router.decision_rules import AGREE_FEATURE, apply_rule_one, mutual_verification_rule

from .answers import answers_agree
from .inputs import check_keep_tokens, make_request
from .pipeline_parts import Result
from .threads import parallel

CHECKS = ("small_direct", "small_reason")


@dataclass
class MutualVerification:
    """Run `large_direct` and the check (beside each other when the models sit on different devices); if the
    answers agree (`answers.answers_agree`: canonical forms equal and not empty) return the large answer, else escalate with `keep_tokens` reasoning tokens
    (None = all). With check="small_reason" the check's reasoning is reused for the escalation.
    """

    pipeline: object
    check: str = "small_direct"
    keep_tokens: int | None = 64

    def __post_init__(self):
        if self.check not in CHECKS:
            raise ConfigError(f"The `check` parameter of MutualVerification must be one of {one_of(CHECKS)}. Got {self.check!r} instead.")
        if self.keep_tokens is not None:
            check_keep_tokens(self.keep_tokens)

    def run(self, image=None, question=None, *, messages=None) -> Result:
        """Answer one sample; `result.trace` holds every stage that ran, the last record has `decision`."""
        pipe = self.pipeline
        req = make_request(image, question, messages)
        from routedvlm.router.strategies import parse_strategy

        jobs = {"large": lambda: pipe.run_strategy(req, parse_strategy("large_direct")),
                "check": lambda: pipe.run_strategy(req, parse_strategy(self.check))}
        done = parallel(jobs, pipe.concurrent)
        large, check = done["large"], done["check"]
        agree = float(answers_agree(large.answer, check.answer, req.question))
        rule = mutual_verification_rule(self.keep_tokens)
        _, reason = apply_rule_one(rule, {}, {AGREE_FEATURE: agree}, [], {}, rule["escalate"])
        if reason == "agree":
            large.trace = [*check.trace, *large.trace]
            large.trace[-1] = {**large.trace[-1], "decision": "accept"}
            return large
        reuse = check if self.check == "small_reason" else None
        res = pipe.escalate(large, self.keep_tokens, reasoning=reuse)
        res.trace = [*check.trace, *res.trace]
        res.trace[-1] = {**res.trace[-1], "decision": "escalate"}
        return res

    __call__ = run
