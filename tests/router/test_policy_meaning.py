"""load_router checks every policy.json parameter against its meaning, not only its type (issue #26): each tampered
value below loaded before and now ends in a RouterLoadError naming the field (so RoutedVLM and serve fall back)."""
import json

import pytest
from conftest import FEATURES, STRATEGIES

from routedvlm.errors import RouterLoadError
from routedvlm.router import load_router

CERT = {"delta": 0.1, "n": 120, "bound": 0.02, "method": "ltt", "losses": 1, "feasible": True}
BINARY = {"name": "binary", "accept": "large_direct", "escalate": "transfer_16"}
MV = {"name": "mutual-verification", "param": None, "accept": "large_direct", "escalate": "transfer_16"}


@pytest.mark.parametrize("edit, problem", [
    ({"rule": {**BINARY, "param": 5}}, r"\(theta, a probability\) of a 'binary' rule must be in \[0, 1\]\. Got 5\."),
    ({"rule": {**BINARY, "param": 1e308}}, r"of a 'binary' rule must be in \[0, 1\]\. Got 1e\+308\."),
    ({"rule": {**BINARY, "param": -1}}, r"of a 'binary' rule must be in \[0, 1\]\. Got -1\."),
    ({"rule": {**BINARY, "param": 0.5, "escalate": "transfer_999999"}},
     r"`rule\['escalate'\]` must be a strategy id such as 'large_reason'\. Got 'transfer_999999'\."),  # K > 65536
    ({"rule": {**MV, "keep_tokens": -3}}, r"`rule\['keep_tokens'\]` must be a positive integer or None \(all\)\. Got -3\."),
    ({"rule": {**MV, "keep_tokens": "16"}}, r"`rule\['keep_tokens'\]` must be a positive integer .* Got '16'\."),
    ({"rule": {**MV, "keep_tokens": 64}}, r"keeping 64 tokens must be 'transfer_64'\. Got 'transfer_16'\."),
    ({"fallback": "small_reason"}, r"`fallback` 'small_reason' of a learned rule must be a candidate"),
    ({"rule": {"name": "lagrangian", "param": 1e300}}, r"\(lambda, accuracy per ms\) .* must be in \[0, 1000\]"),
    ({"certificate": {**CERT, "n": 1e9, "bound": 0}}, r"`certificate\['n'\]` .* must be an integer in \[0, 100000000\]"),
    ({"certificate": {**CERT, "bound": float("nan")}}, r"`certificate\['bound'\]` must be None or a number in \[0, 1\]"),
    ({"certificate": {**CERT, "losses": 500}}, r"`certificate\['losses'\]` must be an integer in \[0, n = 120\]"),
    ({"certificate": {**CERT, "feasible": False}}, r"`certificate` says the target is infeasible, yet the rule is a "
                                                   r"learned one"),
])
def test_a_tampered_parameter_is_a_load_error(lgbm_router, tmp_path, edit, problem):
    folder = lgbm_router.save(tmp_path / "r")
    path = folder / "policy.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **edit}))
    with pytest.raises(RouterLoadError, match=problem):
        load_router(folder)


def test_the_untampered_certificate_and_rules_load(lgbm_router, tmp_path):
    for edit in ({"certificate": CERT}, {"rule": {**BINARY, "param": 0.5}}, {"rule": {**MV, "keep_tokens": 16}},
                 {"rule": {"name": "lagrangian", "param": 0.01}}):
        folder = lgbm_router.save(tmp_path / str(len(list(tmp_path.iterdir()))))
        path = folder / "policy.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **edit}))
        assert load_router(folder).policy.strategies == STRATEGIES


def test_a_reordered_feature_list_is_refused(feature_table, tmp_path):
    """A model trained on named columns: policy.json listing them in another order would feed each feature into
    another's splits (the issue's toy sample 1 answered 33 instead of 36); refused with the model's own order."""
    import lightgbm

    from routedvlm.router import LightGBMRouter, Policy

    y = (feature_table[FEATURES[1]] > 0.5).astype(int)
    params = {"objective": "binary", "verbose": -1, "num_threads": 1, "min_data_in_leaf": 5, "seed": 0}
    booster = lightgbm.train(params, lightgbm.Dataset(feature_table, y), num_boost_round=5)
    policy = Policy(router_type="lightgbm", strategies=["large_direct", "large_reason"], mode="cascade",
                    paid_stages=["large_direct", "small_direct"], features=FEATURES, fallback="large_reason",
                    params={"constants": {"large_reason": 0.97}})
    folder = LightGBMRouter(policy, {"large_direct": booster}).save(tmp_path / "r")
    assert load_router(folder).policy.features == FEATURES
    path = folder / "policy.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "features": FEATURES[::-1]}))
    with pytest.raises(RouterLoadError, match=r"The LightGBM model of 'large_direct' was trained on the features "
                                              r"\['feat__prompt__question_words', .*in that order, but policy\.json lists"):
        load_router(folder)
