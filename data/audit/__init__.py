"""routedvlm.data.audit — the shadow audits' log on disk (parts, lock, checksums, like the labeller's), its history
replayed and drawn, and its export as a data set for relabelling (`routedvlm audit`). It lives in `data` because it
reuses the labeller's parts and lock code, which `inference` may not import; RoutedVLM takes the log as a plain
callable sink.
"""
from __future__ import annotations

from .log import AuditLog, read_log

__all__ = ["AuditLog", "read_log"]
