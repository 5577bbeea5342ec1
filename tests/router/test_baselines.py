"""The rule router types (router/baselines.py): `fixed` and `mutual-verification`."""
import pytest

from routedvlm.router import Decision, RouterError, make_rule_router


def test_rule_routers():
    mv = make_rule_router("mutual-verification", keep_tokens=16)
    agree = "feat__large_direct+small_direct__agree"
    assert mv.decide({agree: 1.0}).strategy == "large_direct"
    assert mv.decide({agree: 0.0}) == Decision("transfer_16", 16, {"large_direct": 0.0, "transfer_16": 1.0}, "p>=tau")
    assert mv.decide({agree: float("nan")}).strategy == "transfer_16"
    assert mv.required_stages == {"large_direct", "small_direct"} and mv.policy.mode == "cascade"
    assert make_rule_router("large_reason").decide({}).strategy == "large_reason"
    with pytest.raises(RouterError, match=r"^Unknown rule router 'sometimes'. Use 'mutual-verification' or a strategy id"):
        make_rule_router("sometimes")
