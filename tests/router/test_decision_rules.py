"""The decision-rule family: a worked example per rule, one contract over both router types (decide on one row ==
decide_batch == choices, for every rule), policy.json format 2 with v1 files still loading as the tau-rule."""
import copy
import json

import numpy as np
import pandas as pd
import pytest

from routedvlm.router import Policy, RouterError, choose, load_router
from routedvlm.router.decision_rules import (AGREE_FEATURE, apply_rule, apply_rule_one, binary_rule, cost_order,
                                              fixed_rule, lagrangian_rule, mutual_verification_rule, tau_rule)

COSTS = {"large_direct": 0.0, "transfer_16": 120.0, "large_reason": 2000.0}
P = pd.DataFrame({"large_direct": [0.9, 0.2, 0.1], "transfer_16": [0.95, 0.8, 0.3], "large_reason": [0.99, 0.97, 0.5]})
FEATS = pd.DataFrame({AGREE_FEATURE: [1.0, 0.0, np.nan]})
RULES = [tau_rule(0.6), lagrangian_rule(1e-4), binary_rule(0.5), mutual_verification_rule(16), fixed_rule("transfer_16")]


@pytest.mark.parametrize("rule, expected", [
    # cheapest with P >= 0.85: row 0 large_direct (0.9); row 1 large_reason (0.97); row 2 none -> the fallback
    (tau_rule(0.85), ["large_direct", "large_reason", "large_reason"]),
    # P - 1e-4 * cost: row 0 .9 / .938 / .79 -> transfer_16; row 1 .2 / .788 / .77 -> transfer_16;
    # row 2 .1 / .288 / .30 -> large_reason
    (lagrangian_rule(1e-4), ["transfer_16", "transfer_16", "large_reason"]),
    # P(large_direct) >= 0.5 -> accept, else large_reason
    (binary_rule(0.5), ["large_direct", "large_reason", "large_reason"]),
    # the two direct answers agree -> large_direct, else transfer_16 (NaN: not agreeing)
    (mutual_verification_rule(16), ["large_direct", "transfer_16", "transfer_16"]),
    (fixed_rule("transfer_16"), ["transfer_16"] * 3),
])
def test_rule_worked_examples(rule, expected):
    order = cost_order(list(P.columns), COSTS)
    assert list(apply_rule(rule, P, FEATS, order, COSTS, "large_reason")) == expected
    one = [apply_rule_one(rule, P.iloc[i].to_dict(), FEATS.iloc[i].to_dict(), order, COSTS, "large_reason")[0]
           for i in range(3)]
    assert one == expected


def test_lagrangian_ties_go_to_the_cheaper_strategy():
    p = pd.DataFrame({"large_direct": [0.9], "large_reason": [0.9]})
    order = cost_order(list(p.columns), COSTS)
    assert list(apply_rule(lagrangian_rule(0.0), p, None, order, COSTS, "large_reason")) == ["large_direct"]
    assert apply_rule_one(lagrangian_rule(0.0), {"large_direct": 0.9, "large_reason": 0.9}, {}, order, COSTS,
                          "large_reason") == ("large_direct", "argmax p-lambda*cost")


def _with_rule(router, rule, mode=None, paid=None):
    r = copy.copy(router)
    r.policy = Policy.from_dict({**router.policy.to_dict(), "rule": rule,
                                 "mode": mode or router.policy.mode,
                                 "paid_stages": paid if paid is not None else router.policy.paid_stages})
    return r


@pytest.mark.parametrize("kind", ["lgbm_router", "probe_router"])
@pytest.mark.parametrize("rule", RULES, ids=lambda r: r["name"])
def test_every_rule_decides_the_same_on_one_row_and_on_a_batch(kind, rule, request, feature_table, sample_table):
    router = _with_rule(request.getfixturevalue(kind), rule, *(("one-shot", []) if rule["name"] == "fixed" else ()))
    df = (sample_table if kind == "probe_router" else feature_table).head(8 if kind == "probe_router" else 60)
    batch = router.decide_batch(df)
    one = [router.decide(row) for row in df.to_dict(orient="records")]
    assert [d.strategy for d in one] == [d.strategy for d in batch] == list(router.choices(df))
    assert [d.reason for d in one] == [d.reason for d in batch]
    assert [d.keep_tokens for d in one] == [d.keep_tokens for d in batch]
    if rule["name"] in ("fixed", "mutual-verification"):
        assert all(d.p_correct == {} for d in one)  # the model is not consulted


def test_a_rule_without_a_model_never_runs_it(lgbm_router, feature_table, monkeypatch):
    router = _with_rule(lgbm_router, mutual_verification_rule(16))
    monkeypatch.setattr(type(router), "predict_proba", lambda *a, **k: pytest.fail("the model ran"))
    assert router.required_stages == {"large_direct", "small_direct"}
    assert router.policy.decision_features == [AGREE_FEATURE]
    assert router.decide({AGREE_FEATURE: 1.0}).strategy == "large_direct"


def test_policy_format_2_round_trip_and_v1_files_load_as_the_tau_rule(lgbm_router, tmp_path):
    router = _with_rule(lgbm_router, binary_rule(0.7))
    router.policy.certificate = {"delta": 0.1, "n": 200, "bound": 0.05, "method": "learn-then-test"}
    router.save(tmp_path / "v2")
    saved = json.loads((tmp_path / "v2" / "policy.json").read_text())
    assert saved["format_version"] == 3 and saved["rule"] == binary_rule(0.7)
    loaded = load_router(tmp_path / "v2")
    assert loaded.policy.decision_rule == binary_rule(0.7) and loaded.policy.certificate["n"] == 200
    lgbm_router.save(tmp_path / "v1")
    old = json.loads((tmp_path / "v1" / "policy.json").read_text())
    old.update(format_version=1, tau=0.42)
    del old["rule"], old["certificate"]
    (tmp_path / "v1" / "policy.json").write_text(json.dumps(old))
    v1 = load_router(tmp_path / "v1")
    assert v1.policy.decision_rule == tau_rule(0.42)
    assert json.loads(json.dumps(v1.policy.to_dict()))["rule"] == {"name": "tau", "param": 0.42}


def test_invalid_rules_are_named(lgbm_router):
    data = lgbm_router.policy.to_dict()
    with pytest.raises(RouterError, match=r"`rule\['name'\]` must be 'binary', 'fixed', 'lagrangian', "
                                          r"'mutual-verification' or 'tau'\. Got 'greedy'\."):
        Policy.from_dict({**data, "rule": {"name": "greedy"}})
    with pytest.raises(RouterError, match=r"`rule\['param'\]` \(lambda, accuracy per ms\) of a 'lagrangian' rule must be in "
                                          r"\[0, 1000\]\. Got -1\.0\."):
        Policy.from_dict({**data, "rule": lagrangian_rule(-1.0)})
    with pytest.raises(RouterError, match=r"needs stage\(s\) \['small_direct'\] before deciding"):
        Policy.from_dict({**data, "paid_stages": ["large_direct"], "features": data["features"][:2],
                          "rule": mutual_verification_rule(16)})
    with pytest.raises(RouterError, match=r"`certificate` lacks \['bound', 'method', 'n'\]"):
        Policy.from_dict({**data, "certificate": {"delta": 0.1}})


def test_choose_worked_example():
    costs = {"large_direct": 0.0, "transfer_16": 100.0, "transfer_64": 200.0, "large_reason": 900.0}
    p = pd.DataFrame(
        [[0.90, 0.95, 0.99, 1.0],   # cheapest qualifying: large_direct
         [0.50, 0.85, 0.99, 1.0],   # large_direct too unsure -> transfer_16
         [0.10, 0.70, 0.79, 0.79],  # nothing reaches 0.8 -> fallback
         [np.nan, 0.10, 0.80, 0.9]],  # NaN never qualifies; 0.80 >= 0.80 does
        columns=["large_direct", "transfer_16", "transfer_64", "large_reason"],
    )
    assert list(choose(p, costs, tau=0.8, fallback="large_reason")) == [
        "large_direct", "transfer_16", "large_reason", "transfer_64"]
    # equal costs: the canonical order decides (large_direct before transfer_16 before transfer_64)
    flat = {s: 1.0 for s in costs}
    assert list(choose(p.iloc[:1], flat, tau=0.5, fallback="large_reason")) == ["large_direct"]
    with pytest.raises(RouterError, match=r"^The `costs` of the decision rule must have an entry for every strategy. Missing \['large_reason'\]"):
        choose(p, {k: v for k, v in costs.items() if k != "large_reason"}, 0.8, "large_reason")
