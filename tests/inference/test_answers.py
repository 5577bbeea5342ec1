"""One answer-agreement test (`inference.answers.answers_agree`): mutual verification, its decision rule and the
labels' agreement feature decide alike on the same answers (docs/DESIGN.md, "Answer agreement")."""
import pytest

from routedvlm.inference.answers import answers_agree
from routedvlm.inference.features import compute_features
from routedvlm.inference.pipeline_parts import Result
from routedvlm.router import MutualVerificationRouter

AGREE = "feat__large_direct+small_direct__agree"
Q = "How many apples are in the picture?"
PAIRS = [
    ("Yes, it is.", "yes", True),  # a yes/no answer is its first word
    ("1,000", "1000", True),  # thousands separators are not part of the number
    ("The cat.", "cat", True),  # articles and punctuation are not part of the answer
    ("12", "13", False),  # different numbers must disagree
    ("", "", False),  # two empty answers verify nothing
]


@pytest.mark.parametrize("a, b, agree", PAIRS)
def test_agreement_worked_examples(a, b, agree):
    assert answers_agree(a, b, Q) is agree and answers_agree(b, a, Q) is agree


class _Stub:
    """A pipeline whose models answer fixed texts (large_direct, small_direct); escalation answers 'escalated'."""

    concurrent = False

    def __init__(self, large, small):
        self.answers = {"large_direct": large, "small_direct": small}

    def run_strategy(self, req, strategy):
        return Result(self.answers[strategy.id], strategy.id, None, None, [{"stage": strategy.id}])

    def escalate(self, large, keep_tokens, reasoning=None):
        return Result("escalated", f"transfer_{keep_tokens}", keep_tokens, None, [{"stage": "escalate"}])


@pytest.mark.parametrize("large, small, agree", PAIRS)
def test_mutual_verification_and_the_router_feature_decide_alike(large, small, agree):
    """Regression: MutualVerification had its own normalisation and escalated on ("Yes, it is.", "yes") and
    ("1,000", "1000") where the router's agreement feature (and so RoutedVLM's mutual verification) accepted."""
    from routedvlm.inference import MutualVerification

    res = MutualVerification(_Stub(large, small), keep_tokens=8).run(None, Q)
    assert res.trace[-1]["decision"] == ("accept" if agree else "escalate")
    assert res.answer == (large if agree else "escalated")
    feats = compute_features(Q, [], {"large_direct": {"answer": large}, "small_direct": {"answer": small}}, names=[AGREE])
    assert feats[AGREE] == float(agree)
    decision = MutualVerificationRouter(keep_tokens=8).decide(feats)
    assert decision.strategy == ("large_direct" if agree else "transfer_8")
