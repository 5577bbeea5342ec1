"""The stamps every artifact records about where it came from: a file's sha256 and the creation time.

One copy for the whole project: `router` imports none of the other packages and every package may import it
(DESIGN.md, dependency direction), so labels metadata, parts, profiles and router folders all stamp alike.
"""
from __future__ import annotations

import datetime as _dt
import hashlib

CHUNK = 1 << 22


def sha256_file(path) -> str:
    """The sha256 hex digest of a file's bytes (read in 4 MiB chunks)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def now_iso() -> str:
    """The current UTC time as ISO 8601 to the second, e.g. '2026-01-31T12:00:00+00:00'."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
