"""Issue 39: policy.json records the checkpoints a router was trained on (weights and config hashes from the labels'
metadata); RoutedVLM refuses the router on other checkpoints (the fallback answers, /health says why) unless
allow_checkpoint_mismatch=True; a router that records nothing loads with a warning."""
import logging

import pytest
from routed_helpers import every_feature_router

from routedvlm.router.checkpoint_identity import checkpoints_of
from routedvlm.router.checkpoints import config_hash, weights_hash

FAKE = "sha256:" + "0" * 64


def _recorded(tiny_pair, **override):
    out = {}
    for alias, vlm in zip(("small", "large"), tiny_pair):
        folder = vlm.describe()["checkpoint"]
        out[alias] = {"name": folder, "weights_hash": weights_hash(folder), "config_hash": config_hash(folder)}
    for alias, fields in override.items():
        out[alias] = {**out[alias], **fields}
    return out


def _routed(tiny_pair, make_pipeline, checkpoints, **kw):
    from routedvlm.inference.routed import RoutedVLM

    router = every_feature_router("large_direct")
    router.policy.checkpoints = checkpoints
    return RoutedVLM(make_pipeline(*tiny_pair), router, fallback="large_direct", **kw)


def test_the_checkpoints_it_was_trained_on_load(tiny_pair, make_pipeline):
    routed = _routed(tiny_pair, make_pipeline, _recorded(tiny_pair))
    assert routed.router is not None and routed.router_error is None


@pytest.mark.parametrize("override,what", [({"large": {"config_hash": FAKE}}, "config"),
                                           ({"small": {"weights_hash": FAKE}}, "weights")])
def test_other_checkpoints_are_refused_unless_allowed(tiny_pair, make_pipeline, images, override, what):
    routed = _routed(tiny_pair, make_pipeline, _recorded(tiny_pair, **override))
    alias = next(iter(override))
    assert routed.router is None and "trained on other checkpoints" in routed.router_error
    assert f"model {alias!r}: {what} sha256:" in routed.router_error and "--allow-checkpoint-mismatch" in routed.router_error
    assert routed.health()["router_healthy"] is False
    assert routed(image=images["wide"], question="Color?").fallback  # the fallback answers
    allowed = _routed(tiny_pair, make_pipeline, _recorded(tiny_pair, **override), allow_checkpoint_mismatch=True)
    assert allowed.router is not None


def test_a_router_that_records_nothing_loads_with_a_warning(tiny_pair, make_pipeline, caplog):
    with caplog.at_level(logging.WARNING, logger="routedvlm.inference.checkpoint_check"):
        routed = _routed(tiny_pair, make_pipeline, {})
    assert routed.router is not None and "records no checkpoints it was trained on" in caplog.text


def test_training_records_the_labels_checkpoints_and_the_policy_checks_the_field():
    from routedvlm.router import Policy

    models = {"small": {"name": "s", "revision": "sha256:" + "1" * 64, "config_hash": "sha256:" + "2" * 64},
              "large": {"name": "org/hub-model", "revision": "abc123", "weights_hash": None, "config_hash": None},
              "mid": {"name": "m", "weights_hash": FAKE}}
    assert checkpoints_of(models, ["small", "large"]) == {  # a hub commit is no weights hash; off-ladder skipped
        "small": {"name": "s", "weights_hash": "sha256:" + "1" * 64, "config_hash": "sha256:" + "2" * 64}}
    kw = dict(router_type="fixed", mode="one-shot", strategies=["large_direct"], fallback="large_direct")
    assert Policy(**kw, checkpoints=checkpoints_of(models, ["small", "large"])).checkpoints["small"]["name"] == "s"
    with pytest.raises(Exception, match=r"`checkpoints` names 'mid', which is not a model of the ladder"):
        Policy(**kw, checkpoints={"mid": {"name": "m"}})
    with pytest.raises(Exception, match=r"`checkpoints\['small'\]` must be a dict of"):
        Policy(**kw, checkpoints={"small": {"weights_hash": 5}})
