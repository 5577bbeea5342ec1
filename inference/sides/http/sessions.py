"""Which prefix-cache namespace (vLLM `cache_salt`) and which affinity header each HTTP call of a request carries
(sides/http/side.py's module docstring says why)."""
from __future__ import annotations

import os
import uuid

SESSION_HEADER_ENV, SESSION_HEADER = "ROUTEDVLM_SESSION_HEADER", "x-session-id"


# stages whose calls share the sample's prefix-cache namespace in a measured run (see remote_prompt.py); on a ladder
# also `<m>_direct` and `<m>_transfer` of every answering model above the cheapest (`shares_prefix`)
SHARED_SALT_STAGES = ("large_direct", "large_transfer", "escalate")


def shares_prefix(stage: str) -> bool:
    """Whether a call of `stage` continues (or seeds) its model's image+question prefix of this sample."""
    if stage in SHARED_SALT_STAGES or stage.endswith("_transfer"):
        return True
    return stage.endswith("_direct") and not stage.startswith("small_")


def session_headers(request) -> dict:
    """The affinity header of a call for `request`: {header: key}, the key the same for every call of one routed
    request (its request id) or of one measured sample (its namespace); {} when it has neither or the header is
    switched off (`$ROUTEDVLM_SESSION_HEADER` empty)."""
    name = os.environ.get(SESSION_HEADER_ENV, SESSION_HEADER).strip()
    key = request.__dict__.get("_session") or request.__dict__.get("_measure")
    return {name: key} if name and key else {}


def measurement_salt(request, stage: str) -> str | None:
    """The `cache_salt` of a call in a measured run (`request._measure` set by run_many), else None: the sample's
    own namespace for `large_direct` and the two-stage calls, a fresh one (a cold call) for everything else."""
    base = request.__dict__.get("_measure")
    if base is None:
        return None
    return base if shares_prefix(stage) else f"{base}-{uuid.uuid4().hex[:8]}"
