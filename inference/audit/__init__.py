"""routedvlm.inference.audit — the certified promise checked on live traffic: anytime-valid bounds on the
disagreement and regret rates of sampled requests against the reference strategy, and the status they give
(holding, unproven, violated). See docs/audit.md; the file map is docs/layout.md.
"""
from __future__ import annotations

from .monitor import HOLDING, STATUSES, UNPROVEN, VIOLATED, AuditMonitor, FeedbackError

__all__ = ["HOLDING", "STATUSES", "UNPROVEN", "VIOLATED", "AuditMonitor", "FeedbackError"]
