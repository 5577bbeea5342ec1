"""policy.json format 3 (`ladder`), version-2 files read as the pair, and the climb of a cascade (`next_action`)."""
import json
import shutil
from pathlib import Path

import pytest

from routedvlm.errors import RouterError
from routedvlm.router import FixedRouter, MutualVerificationRouter, Policy, Router, load_router, next_action
from routedvlm.router.decision_rules import (apply_rule_one, describe, mutual_verification_rule, rule_features,
                                             rule_problems, rule_stages)
from routedvlm.router.ladder import paid_order, stages_to_pay
from routedvlm.router.policy import FORMAT_VERSION

V2 = Path(__file__).parent / "data" / "pair_v2_lightgbm"
LADDER = ["small", "mid", "large"]
FEATS = ["feat__prompt__q", "feat__small_direct__e", "feat__mid_direct__e"]


def ladder_policy(**kw) -> Policy:
    base = dict(router_type="fixed", strategies=["mid_direct"], ladder=LADDER, mode="one-shot", fallback="mid_direct",
                params={"strategy": "mid_direct"})
    return Policy(**{**base, **kw})


def test_v2_pair_router_reads_as_the_pair_and_decides(tmp_path):
    router = load_router(V2)
    p = router.policy
    assert p.format_version == 2 and p.ladder == ["small", "large"] and p.is_pair
    assert p.paid_stages == ["large_direct", "small_direct"]
    row = {f: 0.5 for f in p.features}
    assert router.decide(row).strategy in p.strategies
    # the pair keeps its order: large_direct first, then small_direct
    assert next_action(router, {}, []).stage == "large_direct"
    assert next_action(router, {}, ["large_direct"]).stage == "small_direct"
    step = next_action(router, row, ["large_direct", "small_direct"])
    assert step.kind == "answer" and step.decision == router.decide(row)


def test_v2_file_naming_a_longer_ladder_is_refused(tmp_path):
    folder = tmp_path / "r"
    shutil.copytree(V2, folder)
    data = json.loads((folder / "policy.json").read_text())
    (folder / "policy.json").write_text(json.dumps({**data, "ladder": LADDER}))
    with pytest.raises(RouterError, match=r"`ladder` \['small', 'mid', 'large'\] needs format_version 3"):
        load_router(folder)


def test_v3_ladder_policy_round_trips(tmp_path):
    router = FixedRouter(policy=ladder_policy())
    router.save(tmp_path)
    saved = json.loads((tmp_path / "policy.json").read_text())
    assert FORMAT_VERSION == 3 and saved["format_version"] == 3 and saved["ladder"] == LADDER
    back = load_router(tmp_path)
    assert back.policy.ladder == LADDER and not back.policy.is_pair and back.decide({}).strategy == "mid_direct"


def test_ladder_policy_problems_are_named():
    with pytest.raises(RouterError, match=r"`strategies` holds \['mid_direct'\], which run\(s\) a model not on the ladder"):
        Policy(router_type="fixed", strategies=["mid_direct"], mode="one-shot", fallback="mid_direct")
    with pytest.raises(RouterError, match=r"`ladder`: A ladder of 3 models is named \['small', 'mid', 'large'\]"):
        ladder_policy(ladder=["small", "large", "mid"])
    with pytest.raises(RouterError, match=r"`paid_stages` of a ladder must list distinct direct stages of its models, "
                                          r"cheapest first"):
        ladder_policy(mode="cascade", paid_stages=["mid_direct", "small_direct"], features=FEATS)
    with pytest.raises(RouterError, match=r"`paid_stages` of a cascade must list at least one direct stage"):
        ladder_policy(mode="cascade", paid_stages=[])
    with pytest.raises(RouterError, match=r"needs stage\(s\) \['mid_direct'\] that are not in `paid_stages`"):
        ladder_policy(mode="cascade", paid_stages=["small_direct"], features=FEATS,
                      rule={"name": "tau", "param": 0.5})


def test_paid_order_climbs_a_ladder_and_keeps_the_pair_shape():
    assert paid_order(["large_direct", "small_direct"]) == ["large_direct", "small_direct"]
    assert paid_order(["small_direct", "large_direct"]) == ["large_direct", "small_direct"]
    assert paid_order(["large_direct", "mid_direct", "small_direct"], LADDER) == ["small_direct", "mid_direct",
                                                                                  "large_direct"]


class Confident(Router):
    """P(correct) 0.9 for mid_direct and 0.2 for the rest: the tau-rule at 0.5 accepts mid_direct's answer."""

    def predict_proba(self, features):
        import pandas as pd

        return pd.DataFrame({s: [0.9 if s == "mid_direct" else 0.2] * len(features) for s in self.policy.strategies},
                            index=features.index)

    def _proba_row(self, row):
        return {s: 0.9 if s == "mid_direct" else 0.2 for s in self.policy.strategies}


def test_next_action_climbs_then_accepts_or_escalates():
    strategies = ["small_direct", "mid_direct", "large_direct", "transfer_small_mid_16", "transfer_mid_large_16"]
    policy = Policy(router_type="fixed", strategies=strategies, ladder=LADDER, mode="cascade",
                    paid_stages=["small_direct", "mid_direct"], features=FEATS, fallback="transfer_mid_large_16",
                    expected_cost_ms={s: float(i) for i, s in enumerate(strategies)}, tau=0.5)
    router = Confident(policy)
    assert stages_to_pay(router) == ["small_direct", "mid_direct"]
    assert next_action(router, {}, []).stage == "small_direct"  # cheapest first
    assert next_action(router, {}, ["small_direct"]).stage == "mid_direct"
    row = {f: 1.0 for f in FEATS}
    step = next_action(router, row, ["small_direct", "mid_direct"])
    assert (step.kind, step.strategy, step.accept, step.continues) == ("answer", "mid_direct", True, False)
    router.policy.tau = 0.95  # nothing reaches tau: the fallback transfer mid -> large, large_direct not paid
    step = next_action(router, row, ["small_direct", "mid_direct"])
    assert (step.strategy, step.accept, step.continues) == ("transfer_mid_large_16", False, False)
    router.policy.fallback = "transfer_small_mid_16"  # its target's direct pass was paid: it continues mid's prefix
    assert next_action(router, row, ["small_direct", "mid_direct"]).continues


def test_mutual_verification_between_any_two_models():
    rule = mutual_verification_rule(16, "small", "mid")
    assert rule["accept"] == "mid_direct" and rule["escalate"] == "transfer_small_mid_16"
    assert rule_features(rule) == ["feat__mid_direct+small_direct__agree"]
    assert rule_stages(rule) == ["mid_direct", "small_direct"] and describe(rule) == "mutual verification K=16 small/mid"
    assert rule_problems(rule, ["mid_direct", "transfer_small_mid_16"]) == []
    assert apply_rule_one(rule, {}, {"feat__mid_direct+small_direct__agree": 1.0}, [], {}, "x")[0] == "mid_direct"
    assert apply_rule_one(rule, {}, {"feat__mid_direct+small_direct__agree": 0.0}, [], {}, "x")[0] == \
        "transfer_small_mid_16"
    bad = {**rule, "accept": "large_direct"}
    assert any("must be 'mid_direct'" in p for p in rule_problems(bad, ["large_direct", "transfer_small_mid_16"]))
    # the pair's rule keeps its name and feature
    pair = mutual_verification_rule(16)
    assert describe(pair) == "mutual verification K=16" and rule_features(pair) == [
        "feat__large_direct+small_direct__agree"]
    assert MutualVerificationRouter(16).decide({"feat__large_direct+small_direct__agree": 1.0}).strategy == \
        "large_direct"
