"""A router folder read back: the router type its policy.json names, looked up in `ROUTER_TYPES` (name → module,
imported lazily, so a LightGBM router never imports torch), with its model files verified before any parser sees them.
"""
from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from routedvlm.errors import RouterLoadError, one_of

from .policy import Policy

if TYPE_CHECKING:
    from .base import Router

log = logging.getLogger(__name__)

ROUTER_TYPES = {
    "lightgbm": "routedvlm.router.lightgbm_router:LightGBMRouter",
    "lora-probe": "routedvlm.router.lora_probe:LoRAProbeRouter",
    "self-probe": "routedvlm.router.self_probe:SelfProbeRouter",
    "mutual-verification": "routedvlm.router.rules:MutualVerificationRouter",
    "fixed": "routedvlm.router.rules:FixedRouter",
}


def router_class(router_type: str) -> type[Router]:
    """The Router subclass registered for `router_type`."""
    if router_type not in ROUTER_TYPES:
        raise RouterLoadError(f"Unknown router_type {router_type!r}; valid types are {one_of(ROUTER_TYPES)}.")
    module, _, name = ROUTER_TYPES[router_type].partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as exc:
        raise RouterLoadError(
            f"Router type {router_type!r} needs {module}, which cannot be imported ({exc}). "
            "Install the dependencies of that router type."
        ) from None


def load_folder(directory) -> Router:
    """The router in `directory`; its model files are verified (integrity.py) before anything parses them."""
    from .integrity import verify_files

    directory = Path(directory)
    if not directory.is_dir():
        raise RouterLoadError(f"No router folder at {str(directory)!r}.")
    policy = Policy.load(directory)
    cls = router_class(policy.router_type)
    unhashed = verify_files(policy, directory, cls.model_files(policy))
    if unhashed:
        log.info("%s (policy.json format version %d) records no sha256 for %s", directory, policy.format_version,
                 unhashed)
        cls._check_unverified(directory, unhashed)
    return cls._from_folder(policy, directory)
