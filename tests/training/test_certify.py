"""Certified calibration (Learn-then-Test over the rule family): a worked example small enough to check by hand,
the infeasible case with its row estimate, absolute and latency targets, and the policy it writes."""
import numpy as np
import pandas as pd
import pytest

from routedvlm.router import Policy
from routedvlm.router.decision_rules import fixed_rule
from routedvlm.training.calibration.certify import apply_to_policy, certify, risk_spec
from routedvlm.training.probe.evaluate import PrecomputedRouter

FEATURE = "feat__large_direct__logprob_mean"
REGRET_95 = {"kind": "accuracy", "value": 0.95, "loss": "regret"}


def _rows(n: int, wrong_every: int = 10) -> pd.DataFrame:
    """large_reason is always right (100 ms after large_direct's 10 ms); large_direct is wrong on every
    `wrong_every`-th row. The router's P(large_direct) is 0.9 where it is right and 0.1 where it is wrong."""
    wrong = np.arange(n) % wrong_every == 0
    return pd.DataFrame({
        "sample_id": [f"s{i}" for i in range(n)], FEATURE: np.where(wrong, -3.0, -0.1),
        "correct__large_direct": ~wrong, "latency_ms__large_direct": 10.0,
        "correct__large_reason": True, "latency_ms__large_reason": 100.0,
    }, index=pd.RangeIndex(n))


def _router(df: pd.DataFrame) -> PrecomputedRouter:
    policy = Policy(router_type="lightgbm", strategies=["large_direct", "large_reason"], mode="cascade",
                    paid_stages=["large_direct"], features=[FEATURE], fallback="large_reason",
                    expected_cost_ms={"large_direct": 0.0, "large_reason": 100.0})
    ok = df["correct__large_direct"].to_numpy()
    p = pd.DataFrame({"large_direct": np.where(ok, 0.9, 0.1), "large_reason": 0.99}, index=df.index)
    return PrecomputedRouter(policy, p)


def test_worked_example_certifies_accept_or_reason():
    calib, train = _rows(100), _rows(300)
    cal = certify(_router(calib), calib, train, REGRET_95, delta=0.1)
    # regret vs large_reason (right everywhere on the training rows): limit 0.05 x 1.0; four chains: level 0.1 / 4
    assert (cal.spec.kind, cal.spec.reference, cal.level) == ("regret", "large_reason", 0.025)
    assert cal.spec.alpha == pytest.approx(0.05)
    # accepting large_direct where P = 0.9 and reasoning where P = 0.1 has no regret: p = 0.95^100 = 0.0059 <= 0.025;
    # latency 10 ms (large_direct, paid) + 100 ms on the 10 % escalated rows = 20 ms
    assert cal.feasible and cal.chosen.losses == 0 and cal.chosen.mean_latency_ms == pytest.approx(20.0)
    assert cal.chosen.p_value == pytest.approx(0.95 ** 100)
    # tau, lagrangian and binary all reach that point; a tie goes to the simpler rule: binary at the first such
    # threshold, 0.9
    assert cal.chosen.member.chain == "binary" and cal.chosen.member.rule["param"] == pytest.approx(0.9)
    assert cal.best("tau").member.rule == {"name": "tau", "param": 0.9} and cal.best("tau").mean_latency_ms == 20.0
    # accepting everything (tau <= 0.1) has 10 regret rows: p = P(Bin(100, 0.05) <= 10) = 0.99 -> not certified
    assert not cal.chains["tau"][-1].certified and cal.chains["tau"][-1].losses == 10
    # always large_reason: regret 0 by construction, certified without a test (p = 0)
    ref = next(s for s in cal.chains["baselines"] if s.member.rule == fixed_rule("large_reason"))
    assert ref.certified and ref.p_value == 0.0 and cal.chains["baselines"][0] is ref
    cert = cal.certificate()
    assert (cert["delta"], cert["n"], cert["feasible"]) == (0.1, 100, True) and cert["bound"] == pytest.approx(0.05)
    assert (cert["loss_kind"], cert["outcome"], cert["trivial"], cert["certified"]) == ("regret", "routing", False, True)
    assert "accuracy >= accuracy(large_reason) - 0.0500" in cert["statement"]


def test_too_few_rows_is_infeasible_and_says_how_many_are_needed():
    calib, train = _rows(20), _rows(300)
    cal = certify(_router(calib), calib, train, REGRET_95, delta=0.1)
    # 0 regrets in 20 rows: p = 0.95^20 = 0.36 > 0.025; the smallest n with 0.95^n <= 0.025 is 72
    assert not cal.feasible and cal.chosen.member.rule == fixed_rule("large_reason")
    assert cal.rows_needed == 72
    # the fallback is no certified routing: the certificate says so (not "certified" on the strength of always the
    # reference, which meets any relative target by construction)
    cert = cal.certificate()
    assert (cert["certified"], cert["trivial"], cert["outcome"]) == (False, True, "infeasible")
    assert cal.statement().startswith("infeasible with 20 calibration rows: no rule certifies accuracy >= "
                                      "accuracy(large_reason) - 0.0500 at delta=0.1; about 72 are needed")


def test_absolute_and_latency_targets():
    calib, train = _rows(100), _rows(300)
    router = _router(calib)
    # min_accuracy 0.8: error <= 0.2; "always large_direct" (10 % errors, 10 ms) is certified and the fastest
    cal = certify(router, calib, train, {"kind": "min_accuracy", "value": 0.8})
    assert cal.spec.kind == "error" and cal.chosen.member.rule == fixed_rule("large_direct")
    assert cal.certificate()["bound"] == pytest.approx(0.8)
    # ... a fixed strategy, no routing: reported as such
    cert = cal.certificate()
    assert cert["trivial"] and cert["outcome"] == "fixed rule" and "a fixed rule, no routing" in cert["statement"]
    # a 15 ms budget: the most accurate member within it is again always large_direct (not certified: a budget)
    cal = certify(router, calib, train, {"kind": "latency_ms", "value": 15.0})
    assert cal.chosen.member.rule == fixed_rule("large_direct") and cal.certificate()["delta"] is None


def test_apply_to_policy_writes_the_rule_its_mode_and_the_certificate():
    calib, train = _rows(100), _rows(300)
    router = _router(calib)
    cal = certify(router, calib, train, {"kind": "min_accuracy", "value": 0.8})
    apply_to_policy(router.policy, cal)
    p = router.policy
    assert p.decision_rule == fixed_rule("large_direct") and (p.mode, p.paid_stages) == ("one-shot", [])
    assert p.certificate["feasible"] and p.target == {"kind": "min_accuracy", "value": 0.8}
    assert risk_spec({"kind": "accuracy", "value": 0.9}, train, p.strategies).alpha == pytest.approx(0.1)


def _gains_rows(n: int) -> pd.DataFrame:
    """As `_rows`, but large_reason is wrong on row 5 of every 10, where large_direct is right: on those rows the
    router's choice of large_direct gains over the reference (both are right on 90 %; the reference is the costlier)."""
    df = _rows(n)
    df["correct__large_reason"] = np.arange(n) % 10 != 5
    return df


def test_the_difference_counts_the_rows_the_router_gains_and_certifies_what_the_regret_cannot():
    calib, train = _gains_rows(2000), _gains_rows(300)
    router = _router(calib)
    # accept large_direct everywhere: 200 rows lost (large_direct wrong, large_reason right), 200 gained: 0
    spec = risk_spec({"kind": "accuracy", "value": 0.95}, train, router.policy.strategies)
    assert spec.kind == "difference" and spec.alpha == pytest.approx(0.05 * 0.9)
    diff = certify(router, calib, train, {"kind": "accuracy", "value": 0.95, "test": "clopper-pearson"}, delta=0.1)
    last = diff.chains["tau"][-1]  # tau = 0: always the cheapest candidate, large_direct
    assert (last.losses, last.gains, last.risk) == (200, 200, 0.0)
    # its p-value is the least e with CP_upper(200/2000, e/2) - CP_lower(200/2000, e/2) <= 0.045 (bounds at e / 2)
    from scipy.stats import beta
    e = last.p_value
    gap = beta.ppf(1 - e / 2, 201, 1800) - beta.ppf(e / 2, 200, 1801)
    assert gap == pytest.approx(0.045, abs=1e-6) and last.certified
    # the regret sees 200 losses in 2000 against 0.045: never certified; under the difference it is, and it is the
    # fastest member (10 ms: large_direct alone)
    reg = certify(router, calib, train, {"kind": "accuracy", "value": 0.95, "loss": "regret"}, delta=0.1)
    assert not reg.chains["tau"][-1].certified and reg.chosen.mean_latency_ms > 10.0
    assert diff.chosen.mean_latency_ms == 10.0
    cert = diff.certificate()
    assert cert["loss_kind"] == "difference" and cert["gains"] == diff.chosen.gains
    assert cert["method"].startswith("learn-then-test: accuracy difference, Clopper-Pearson")
    assert "accuracy >= accuracy(large_reason) - 0.0450" in cert["statement"]


def test_the_default_betting_test_certifies_it_too_and_an_unknown_loss_is_refused():
    from routedvlm.errors import ConfigError

    calib, train = _gains_rows(2000), _gains_rows(300)
    cal = certify(_router(calib), calib, train, {"kind": "accuracy", "value": 0.95}, delta=0.1)  # the default
    assert cal.certificate()["method"].startswith("learn-then-test: accuracy difference, Waudby-Smith-Ramdas")
    assert cal.feasible and cal.chosen.mean_latency_ms == 10.0  # 200 lost, 200 gained in 2000: large_direct alone
    assert all(0.0 <= s.p_value <= 1.0 for rows in cal.chains.values() for s in rows)
    with pytest.raises(ConfigError, match="`loss` must be one of difference, regret"):
        certify(_router(calib), calib, train, {"kind": "accuracy", "value": 0.95, "loss": "hinge"})


def test_a_difference_certificate_round_trips_through_policy_json_and_bad_fields_are_named(tmp_path):
    calib, train = _gains_rows(2000), _gains_rows(300)
    router = _router(calib)
    apply_to_policy(router.policy, certify(router, calib, train, {"kind": "accuracy", "value": 0.95}))
    p = router.policy
    assert p.problems() == [] and p.certificate["loss_kind"] == "difference" and p.certificate["gains"] == 200
    from routedvlm.errors import RouterLoadError

    assert Policy.from_dict(p.to_dict()).certificate == p.certificate
    for bad, why in (({"gains": 5000}, r"certificate\['gains'\]"), ({"loss_kind": "hinge"}, "loss_kind")):
        with pytest.raises(RouterLoadError, match=why):
            Policy.from_dict({**p.to_dict(), "certificate": {**p.certificate, **bad}})


def test_fewer_chains_split_delta_fewer_ways_and_the_reference_stays_the_fallback():
    from routedvlm.errors import ConfigError

    calib, train = _rows(100), _rows(300)
    cal = certify(_router(calib), calib, train, REGRET_95, delta=0.1, chains=["tau"])
    assert set(cal.chains) == {"tau", "baselines"} and cal.level == pytest.approx(0.1)  # the reference tests nothing
    assert [s.member.rule for s in cal.chains["baselines"]] == [fixed_rule("large_reason")]
    assert cal.chosen.member.chain == "tau" and cal.chosen.member.rule == {"name": "tau", "param": 0.9}
    few = certify(_router(_rows(20)), _rows(20), train, REGRET_95, delta=0.1, chains=["tau"])
    assert not few.feasible and few.chosen.member.rule == fixed_rule("large_reason")
    with pytest.raises(ConfigError, match="`chains` must name some of tau, lagrangian, binary, baselines"):
        certify(_router(calib), calib, train, REGRET_95, chains=["nope"])
