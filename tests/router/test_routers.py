"""One contract test over every router type (the registry's), Policy validation, loading by class."""
import json
import re

import pytest

from routedvlm.router import ROUTER_TYPES, Decision, FixedRouter, MutualVerificationRouter, Policy, RouterError, load_router
from routedvlm.router.policy import FORMAT_VERSION


@pytest.fixture
def make_router(lgbm_router, request):
    factories = {
        "lightgbm": lambda: lgbm_router,
        "knn": lambda: request.getfixturevalue("knn_router"),
        "lora-probe": lambda: request.getfixturevalue("probe_router"),
        "self-probe": lambda: request.getfixturevalue("self_probe_router"),
        "mutual-verification": lambda: MutualVerificationRouter(keep_tokens=32),
        "fixed": lambda: FixedRouter("transfer_64"),
    }

    def make(router_type):
        assert router_type in factories, f"router type {router_type!r} is registered: add a factory to this contract test"
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
    # the run-time hooks are declared on Router: every type answers them (RoutedVLM calls them without asking)
    assert isinstance(router.hidden_layers, list) and all(isinstance(i, int) for i in router.hidden_layers)
    assert isinstance(router.trace_info(), dict)
    assert (router.hidden_layers != []) == (router_type == "self-probe")
    # the registry names the class it loads and, for a type with model files, the trainer that makes them
    entry = ROUTER_TYPES[router_type]
    assert entry.router_class() is type(router)
    assert (entry.trainer is None) == (router_type in ("fixed", "mutual-verification"))


def test_default_hooks_do_nothing():
    """A router type that reads nothing beside its features inherits hooks that add nothing and check nothing."""
    router = FixedRouter("large_direct")
    assert router.hidden_layers == [] and router.trace_info() == {}
    assert router.attach(pipeline=object()) is None
    assert router.runtime_inputs(request=None, stages={}, pipeline=None) == {}


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


def test_decisions_follow_policy_edits_made_in_place(lgbm_router, feature_table):
    """decide() prepares the policy once; an edit inside one of its dicts or lists must still be seen."""
    from routedvlm.router import LightGBMRouter

    router = LightGBMRouter(Policy.from_dict(lgbm_router.policy.to_dict()), lgbm_router.boosters)
    row = feature_table.iloc[0].to_dict()
    router.decide(row)
    router.policy.expected_cost_ms["large_direct"], router.policy.expected_cost_ms["large_reason"] = 1.0, 0.0
    assert router.decide(row).strategy == "large_reason"  # P = 0.97 >= tau, now the cheapest
    router.policy.rule.update({"name": "lagrangian", "param": 0.0})
    router.policy.strategies.remove("large_reason")
    assert router.decide(row) == router.decide_batch(feature_table.head(1))[0]
    assert router.decide(row).reason == "argmax p-lambda*cost" and "large_reason" not in router.decide(row).p_correct


def test_router_class_load(lgbm_router, tmp_path):
    from routedvlm.router import LightGBMRouter, Router

    folder = lgbm_router.save(tmp_path / "r")
    assert isinstance(Router.load(folder), LightGBMRouter) and isinstance(LightGBMRouter.load(folder), LightGBMRouter)
    with pytest.raises(RouterError, match=r"holds a 'lightgbm' router, not a MutualVerificationRouter"):
        MutualVerificationRouter.load(folder)
