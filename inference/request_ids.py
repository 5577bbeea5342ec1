"""Request ids of a RoutedVLM: `req-<32 hex>`, or `req-<replica>-<32 hex>` when the process is a named replica
(`routedvlm serve --replica-id`): unique across replicas, and the replica that answered (and keeps the request's
audit) can be read back from the id."""
from __future__ import annotations

import re
import uuid


def request_id(replica: str | None = None) -> str:
    """A new request id, `req-<32 hex>`, or `req-<replica>-<32 hex>` for a named replica (unique across replicas;
    the replica that answered, and so holds the request's audit, can be read from it)."""
    return f"req-{replica}-{uuid.uuid4().hex}" if replica else f"req-{uuid.uuid4().hex}"


def replica_of(request_id: str) -> str | None:
    """The replica named in a request id (`request_id`), None for an id without one."""
    m = _REPLICA_ID.fullmatch(request_id)
    return m.group(1) if m else None


_REPLICA_ID = re.compile(r"req-(.+)-[0-9a-f]{32}")
