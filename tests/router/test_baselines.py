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


def test_a_fixed_strategy_of_a_ladder_model_loads_with_the_smallest_ladder_that_has_it():
    """Regression: `router="mid_direct"` was refused once policies named their ladder (a fixed policy read as the pair)."""
    from routedvlm.router import load_router

    ladders = {s: load_router(s).policy.ladder for s in ("large_reason", "transfer_8", "mid_direct",
                                                         "transfer_small_mid_all", "mid1_reason", "transfer_mid1_mid3_16")}
    assert ladders == {"large_reason": ["small", "large"], "transfer_8": ["small", "large"],
                       "mid_direct": ["small", "mid", "large"], "transfer_small_mid_all": ["small", "mid", "large"],
                       "mid1_reason": ["small", "mid1", "mid2", "large"],
                       "transfer_mid1_mid3_16": ["small", "mid1", "mid2", "mid3", "large"]}
    assert load_router("mid_direct").decide({}).strategy == "mid_direct"
