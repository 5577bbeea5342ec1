"""The level that holds after a choice (issue 27): a certificate restated after choosing among routers quotes the
union-bound level everywhere; the registry's delta ledger spends delta per version compared on the same
calibration rows and refuses comparisons past its limit; a router that missed its test target is never champion."""
from types import SimpleNamespace

import pytest

from routedvlm.training import registry
from routedvlm.training.calibration.selection import restate_after_selection


def _cert(delta=0.025):
    return {"delta": delta, "delta_each": delta, "delta_after_selection": delta, "routers_compared": 1,
            "feasible": True, "calibration_hash": "abc",
            "statement": f"with probability >= {1 - delta:.4g} over the calibration draw, on new traffic from the same "
                         "distribution: accuracy >= 0.9000 (tau = 0.9; ...)"}


def test_a_restated_certificate_quotes_the_level_after_the_choice_and_never_lowers_it():
    cert = restate_after_selection(_cert(), 0.1, 4, "demo champion")
    assert cert["delta_each"] == 0.025 and cert["delta_after_selection"] == 0.1 and cert["routers_compared"] == 4
    # the headline key states the level that holds, not the level each router was tested at (issue 37)
    assert cert["delta"] == 0.1
    assert cert["statement"] == ("with probability >= 0.9 over the calibration draw (after choosing among 4 routers "
                                 "certified on the same calibration rows, each at delta 0.025), on new traffic from "
                                 "the same distribution: accuracy >= 0.9000 (tau = 0.9; ...)")
    again = restate_after_selection(dict(cert), 0.05, 2, "ledger")  # a smaller level never replaces a larger one
    assert again["delta_after_selection"] == 0.1 and again["routers_compared"] == 4 and again["delta"] == 0.1


def test_an_old_certificate_without_delta_each_keeps_its_tested_level_under_that_key():
    old = {k: v for k, v in _cert().items() if k not in ("delta_each", "delta_after_selection")}
    cert = restate_after_selection(old, 0.1, 4, "demo champion")
    assert (cert["delta"], cert["delta_each"], cert["delta_after_selection"]) == (0.1, 0.025, 0.1)


def test_a_restated_result_states_the_level_that_holds_in_its_metrics_too():
    from routedvlm.training.calibration.selection import restate_result

    policy = SimpleNamespace(certificate=_cert(), metrics={"certificate_delta": 0.025})
    result = SimpleNamespace(router=SimpleNamespace(policy=policy), evaluation={}, table="", output_dir=None)
    restate_result(result, 0.1, 4, "demo champion")
    assert policy.metrics["certificate_delta"] == 0.1 and policy.metrics["certificate_delta_each"] == 0.025
    assert result.evaluation["certificate"]["delta"] == 0.1


class FakeClient:
    def __init__(self, versions):
        self.versions = versions

    def search_model_versions(self, _filter):
        return self.versions


def _version(key, delta, state="spent", digest=None):
    tags = {registry.CAL_HASH_TAG: key, registry.DELTA_TAG: str(delta), registry.LEDGER_TAG: state}
    return SimpleNamespace(tags={**tags, **({registry.DIGEST_TAG: digest} if digest else {})})


def _result(tmp_path, delta=0.1, key="abc", models=None):
    policy = SimpleNamespace(certificate={**_cert(delta), "calibration_hash": key}, metrics={}, mode="cascade",
                             model_sha256=models or {"large_direct.txt": "00"}, decision_rule={"name": "tau"},
                             strategies=["large_direct", "large_reason"], features=["feat__prompt__x"])
    router = SimpleNamespace(policy=policy, save=lambda folder: None)
    return SimpleNamespace(router=router, evaluation={}, output_dir=tmp_path)


def test_the_ledger_spends_delta_per_version_on_the_same_calibration_rows(tmp_path):
    client = FakeClient([_version("abc", 0.1), _version("abc", 0.1), _version("other", 0.1),
                         _version("abc", 0.1, "refused")])
    result = _result(tmp_path)
    entry = registry.spend_ledger(client, "vlm-router", result)
    assert not entry["refused"] and entry["spent"] == pytest.approx(0.3)  # two earlier on "abc" + this one
    cert = result.router.policy.certificate
    assert cert["delta_after_selection"] == pytest.approx(0.3) and cert["routers_compared"] == 3
    assert cert["statement"].startswith("with probability >= 0.7 over the calibration draw (after choosing among 3")
    assert result.evaluation["certificate"] is cert and entry["tags"][registry.LEDGER_TAG] == "spent"


def test_the_ledger_refuses_a_comparison_past_its_limit_and_asks_for_fresh_calibration_rows(tmp_path):
    client = FakeClient([_version("abc", 0.25), _version("abc", 0.25)])
    result = _result(tmp_path)
    entry = registry.spend_ledger(client, "vlm-router", result)
    assert entry["refused"] and entry["tags"][registry.LEDGER_TAG] == "refused"
    assert "already spent delta 0.5 on these calibration rows" in entry["why"] and "fresh calibration rows" in entry["why"]
    assert result.router.policy.certificate["delta_after_selection"] == 0.1  # not compared: its own level stands
    assert registry._never_champion(SimpleNamespace(evaluation={"target_met_test": True}), {"feasible": True}, entry)


def test_a_router_that_missed_its_test_target_is_never_champion():
    missed = SimpleNamespace(evaluation={"target_met_test": False, "rows": [{"verdict": "missed by 0.004 (SE 0.02)"}]})
    why = registry._never_champion(missed, {"feasible": True}, {"refused": False})
    assert why == "missed its target on the test rows (missed by 0.004 (SE 0.02))"
    met = SimpleNamespace(evaluation={"target_met_test": True})
    assert registry._never_champion(met, {"feasible": True}, {"refused": False}) == ""


def test_the_same_router_registered_again_spends_nothing_new(tmp_path):
    result = _result(tmp_path)
    digest = registry.router_digest(result.router.policy)
    other = registry.router_digest(_result(tmp_path, models={"large_direct.txt": "11"}).router.policy)
    assert digest != other
    # two earlier registrations of this very router (a re-run) and one of another router on the same rows
    client = FakeClient([_version("abc", 0.1, digest=digest), _version("abc", 0.1, digest=digest),
                         _version("abc", 0.1, digest=other)])
    entry = registry.spend_ledger(client, "vlm-router", result)
    assert entry["spent"] == pytest.approx(0.2) and result.router.policy.certificate["routers_compared"] == 2


def test_the_calibration_hash_keys_on_the_rows_and_their_outcomes_only():
    from routedvlm.training.calibration.certify import calibration_hash
    from routedvlm.training.synthetic import make_synthetic_labels

    rows = make_synthetic_labels(50, seed=3)
    same = rows.sample(frac=1.0, random_state=0).assign(image=[object() for _ in range(50)])  # order, in-memory extras
    assert calibration_hash(rows) == calibration_hash(same)
    assert calibration_hash(rows) != calibration_hash(rows.head(49))
    flipped = rows.assign(correct__large_reason=~rows["correct__large_reason"])
    assert calibration_hash(rows) != calibration_hash(flipped)
