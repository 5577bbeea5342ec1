"""Refuse a router on checkpoints other than the ones it was trained on (RoutedVLM calls `check_checkpoints` when it
loads a router): the served sides' config and weights hashes against `policy.checkpoints`
(router/checkpoint_identity.py). The config is compared first (cheap); the weights are hashed only when it matches
(one sha256 pass over the weight files, as the labeller made). Remote sides are not hashed here."""
from __future__ import annotations

import logging
from pathlib import Path

from routedvlm.errors import RouterLoadError
from routedvlm.router.checkpoint_identity import identity_problems
from routedvlm.router.checkpoints import config_hash, weights_hash
from routedvlm.router.router_types import is_rule

logger = logging.getLogger(__name__)


def _found(side, recorded: dict) -> dict | None:
    """The served checkpoint's hashes (None: not a local folder, so it cannot be checked here)."""
    info = side.describe()
    folder = info.get("checkpoint") or info.get("weights")
    if not folder or not Path(str(folder)).expanduser().is_dir():
        return None
    path = Path(str(folder)).expanduser()
    found = {"config_hash": config_hash(path), "weights_hash": None}
    same_config = not recorded.get("config_hash") or recorded.get("config_hash") == found["config_hash"]
    if same_config and recorded.get("weights_hash"):
        found["weights_hash"] = weights_hash(path)
    return found


def check_checkpoints(router, sides: dict, *, allow_mismatch: bool = False) -> None:
    """RouterLoadError when a served side differs from what `router` was trained on (a warning with
    `allow_mismatch`, or when the router records nothing)."""
    policy = getattr(router, "policy", None)
    recorded = getattr(policy, "checkpoints", None) or {}
    if not recorded:
        kind = getattr(policy, "router_type", None)
        if kind is not None and not is_rule(kind):  # a rule router reads no checkpoints
            logger.warning("router %s records no checkpoints it was trained on (trained by an older routedvlm); "
                           "it cannot be checked against the served models", policy.router_type)
        return
    if allow_mismatch:
        return
    found = {alias: _found(side, recorded[alias]) for alias, side in sides.items() if alias in recorded}
    problems = identity_problems(recorded, found)
    if problems:
        raise RouterLoadError("The router was trained on other checkpoints than the ones served: " + "; ".join(problems)
                              + ". Serve the checkpoints it was trained on, retrain it on these, or pass "
                              "allow_checkpoint_mismatch=True (serve --allow-checkpoint-mismatch) to use it anyway.")
