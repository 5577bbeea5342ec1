"""One contract test over every router type, the decision rule's worked example, Policy validation."""
import importlib
import json
import re

import numpy as np
import pandas as pd
import pytest

from routedvlm.router import (ROUTER_TYPES, Decision, FixedRouter, MutualVerificationRouter, Policy, RouterError,
                              choose, load_router, make_rule_router)
from routedvlm.router.policy import FORMAT_VERSION


@pytest.fixture
def make_router(lgbm_router, request):
    factories = {
        "lightgbm": lambda: lgbm_router,
        "lora-probe": lambda: request.getfixturevalue("probe_router"),
        "self-probe": lambda: request.getfixturevalue("self_probe_router"),
        "mutual-verification": lambda: MutualVerificationRouter(keep_tokens=32),
        "fixed": lambda: FixedRouter("transfer_64"),
    }

    def make(router_type):
        if router_type not in factories:
            module = ROUTER_TYPES[router_type].partition(":")[0]
            try:
                importlib.import_module(module)
            except ImportError:
                pytest.skip(f"{module} is not in this tree")
            pytest.fail(f"router type {router_type!r} exists: add a factory to this contract test")
        return factories[router_type]()

    return make


@pytest.mark.parametrize("router_type", [pytest.param(t, marks=pytest.mark.slow) if t == "lora-probe" else t
                                         for t in sorted(ROUTER_TYPES)])
def test_router_contract(router_type, make_router, sample_table, tmp_path):
    router = make_router(router_type)
    assert router.policy.router_type == router_type
    df = sample_table.head(40)  # features + the sample (image, question); each router reads what it needs
    batch = router.decide_batch(df)
    assert len(batch) == len(df) and all(isinstance(d, Decision) for d in batch)
    for d in batch:
        assert list(d.p_correct) == router.policy.strategies
        expected_k = int(d.strategy.split("_")[1]) if d.strategy.startswith("transfer_") and d.strategy != "transfer_all" else None
        assert d.keep_tokens == expected_k
    # decide (single-row fast path) agrees with decide_batch, p_correct included
    singles = [router.decide(row) for row in df.to_dict(orient="records")]
    assert [(d.strategy, d.reason) for d in singles] == [(d.strategy, d.reason) for d in batch]
    for a, b in zip(singles, batch):
        assert a.p_correct == pytest.approx(b.p_correct)
    assert list(router.decide_with_tau(df, router.policy.tau)) == [d.strategy for d in batch]
    # save -> load -> same decisions
    loaded = load_router(router.save(tmp_path / "router"))
    assert type(loaded) is type(router) and loaded.policy == router.policy
    assert sorted(loaded.policy.model_sha256) == sorted(type(router).model_files(router.policy))  # every file verified
    assert [d.to_dict() for d in loaded.decide_batch(df)] == [d.to_dict() for d in batch]
    json.loads((tmp_path / "router" / "policy.json").read_text())
    # missing features are named
    if router.policy.features:
        missing = router.policy.features[-1]
        with pytest.raises(RouterError, match=rf"^The router needs feature\(s\) \['{re.escape(missing)}'\]"):
            router.decide_batch(df.drop(columns=[missing]))
        with pytest.raises(RouterError, match=rf"^The router needs feature\(s\) \['{re.escape(missing)}'\]"):
            router.decide({k: v for k, v in df.iloc[0].items() if k != missing})
    assert router.required_stages <= {"large_direct", "small_direct"}


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


def test_lightgbm_router_behaviour(lgbm_router, feature_table):
    p = lgbm_router.predict_proba(feature_table)
    assert list(p.columns) == ["large_direct", "transfer_16", "transfer_64", "large_reason"] and (p["large_reason"] == 0.97).all()
    conf = feature_table["feat__large_direct__confidence"]
    chosen = pd.Series(lgbm_router.decide_with_tau(feature_table, 0.6))
    assert (chosen[conf > 0.8] == "large_direct").all()
    assert (chosen[(conf > 0.3) & (conf < 0.4)] == "transfer_64").all()
    assert (chosen[conf < 0.2] == "large_reason").all()
    with pytest.raises(RouterError, match=r"^LightGBMRouter needs a booster or a constant for every strategy: missing \['large_reason'\]"):
        type(lgbm_router)(Policy(**{**lgbm_router.policy.to_dict(), "params": {}}), lgbm_router.boosters)


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


def test_policy_reports_every_bad_field():
    with pytest.raises(RouterError) as err:
        Policy(router_type="lightgbm", strategies=["large_direct", "medium_direct"], mode="sometimes",
               tau=1.5, fallback="nope", features=["feat__small_direct__x"], paid_stages=["large_direct"],
               target={"kind": "speed", "value": -1})
    msg = str(err.value)
    for field in ("`strategies` holds unknown strategy ids ['medium_direct']", "`mode` must be 'cascade' or 'one-shot'",
                  "`tau` must be a number in [0, 1]. Got 1.5", "`fallback` must be a strategy id",
                  "needs stage(s) ['small_direct'] that are not in `paid_stages`", "`target['kind']`", "`target['value']`"):
        assert field in msg, field
    with pytest.raises(RouterError, match=r"`paid_stages` must be \[\] in mode 'one-shot'"):
        Policy(router_type="fixed", strategies=["large_direct"], mode="one-shot", paid_stages=["large_direct"])


def test_policy_json_round_trip_and_newer_version(tmp_path, lgbm_router):
    lgbm_router.policy.save(tmp_path)
    assert Policy.load(tmp_path) == lgbm_router.policy
    data = lgbm_router.policy.to_dict() | {"format_version": FORMAT_VERSION + 1}
    (tmp_path / "policy.json").write_text(json.dumps(data))
    with pytest.raises(RouterError, match=rf"has format_version {FORMAT_VERSION + 1}, newer than this routedvlm understands"):
        Policy.load(tmp_path)


def test_decisions_follow_policy_changes(lgbm_router, feature_table):
    from routedvlm.router import LightGBMRouter

    router = LightGBMRouter(Policy.from_dict(lgbm_router.policy.to_dict()), lgbm_router.boosters)
    row = feature_table.iloc[0].to_dict()
    router.decide(row)
    router.policy.expected_cost_ms = {**router.policy.expected_cost_ms, "large_direct": 1.0, "large_reason": 0.0}
    assert router.decide(row).strategy == "large_reason"  # P = 0.97 >= tau
    assert {d.strategy for d in router.decide_batch(feature_table)} == {"large_reason"}
    router.policy.tau = 0.99
    assert router.decide(row) == router.decide_batch(feature_table.head(1))[0]


def test_router_class_load(lgbm_router, tmp_path):
    from routedvlm.router import LightGBMRouter, Router

    folder = lgbm_router.save(tmp_path / "r")
    assert isinstance(Router.load(folder), LightGBMRouter) and isinstance(LightGBMRouter.load(folder), LightGBMRouter)
    with pytest.raises(RouterError, match=r"holds a 'lightgbm' router, not a MutualVerificationRouter"):
        MutualVerificationRouter.load(folder)


def test_decide_input_errors_and_missing_values(lgbm_router, feature_table):
    row = feature_table.iloc[0].to_dict()
    with pytest.raises(RouterError, match=r"^Features must be numeric \(NaN allowed\)"):
        lgbm_router.decide({**row, "feat__prompt__question_words": "long"})
    with pytest.raises(RouterError, match=r"^decide\(\) takes a dict of features. Got DataFrame"):
        lgbm_router.decide(feature_table.head(1))
    none_row = {**row, "feat__large_direct__confidence": None}
    nan_frame = feature_table.head(1).assign(feat__large_direct__confidence=np.nan)
    assert lgbm_router.decide(none_row) == lgbm_router.decide_batch(nan_frame)[0]  # None = missing = NaN


def test_self_probe_needs_its_hidden_state_and_a_local_large_model(self_probe_router, sample_table, tmp_path):
    import types

    from routedvlm.router.self_probe import HIDDEN_KEY

    row = sample_table.iloc[0].to_dict()
    with pytest.raises(RouterError, match=r"^The self-probe router needs the large model's hidden state"):
        self_probe_router.decide({k: v for k, v in row.items() if k != HIDDEN_KEY})
    with pytest.raises(RouterError, match=r"^The hidden-state vector has 4 values; this self-probe reads 6"):
        self_probe_router.decide({**row, HIDDEN_KEY: np.zeros(4)})
    remote = types.SimpleNamespace(large=types.SimpleNamespace(returns_hidden_states=False, name="http://gpu:8000/v1#big"))
    with pytest.raises(RouterError, match=r"^The self-probe router reads the large model's hidden states, and the "
                                          r"large side is behind an OpenAI-compatible server .*vLLM and SGLang return no"):
        self_probe_router.attach(remote)
    other = tmp_path / "other-large"
    other.mkdir()
    (other / "model.safetensors").write_bytes(b"different weights")
    local = types.SimpleNamespace(large=types.SimpleNamespace(returns_hidden_states=True, name=str(other)))
    with pytest.raises(RouterError, match=r"^The large model .* has weights sha256:[0-9a-f]+, but this self-probe was "
                                          r"trained on the hidden states of sha256:abc"):
        self_probe_router.attach(local)
    one_shot = {**self_probe_router.policy.to_dict(), "mode": "one-shot", "paid_stages": [],
                "features": ["feat__prompt__question_words"]}
    with pytest.raises(RouterError, match=r"^A self-probe router whose rule reads it \(tau\) needs the large_direct pass, "
                                          r"so its mode must be 'cascade'"):
        type(self_probe_router)(Policy(**one_shot), self_probe_router.head)
    # an infeasible certificate falls back to a fixed rule in one-shot mode: it must still load (regression)
    d_in = self_probe_router.hidden["size"] + 1
    head = {k: (v if k == "bias" else v[:d_in]) for k, v in self_probe_router.head.items()}
    fixed = type(self_probe_router)(Policy(**{**one_shot, "rule": {"name": "fixed", "param": None,
                                                                 "strategy": "large_reason"}}), head)
    assert fixed.decide({"feat__prompt__question_words": 3.0}).strategy == "large_reason"
