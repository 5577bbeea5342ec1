"""routedvlm.inference.audit — the certified promise checked on live traffic: anytime-valid bounds (bounds.py),
the live status (monitor.py), shadow audits of sampled requests (shadow.py), vectorised replay (replay.py), the
RoutedVLM hook (hook.py) and the Prometheus view (metrics.py). See docs/audit.md.
"""
from __future__ import annotations

from .monitor import HOLDING, STATUSES, UNPROVEN, VIOLATED, AuditMonitor, FeedbackError

__all__ = ["HOLDING", "STATUSES", "UNPROVEN", "VIOLATED", "AuditMonitor", "FeedbackError"]
