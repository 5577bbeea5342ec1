"""A router folder read back: the router type its policy.json names, looked up in the registry (`router_types.py`,
imported lazily, so a LightGBM router never imports torch), with its model files verified before any parser sees them.
"""
from __future__ import annotations

import logging
from pathlib import Path

from routedvlm.errors import RouterLoadError

from .policy import Policy
from .router_types import router_class

log = logging.getLogger(__name__)


def load_folder(directory):
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
