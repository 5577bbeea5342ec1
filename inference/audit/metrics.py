"""The audit's Prometheus view, read from the monitor at every scrape (`register(registry, snapshot)`).

routedvlm_audits_total{router, result}: audits done, skipped (queue full) and failed; routedvlm_audit_disagreement_rate
{router}: in the current epoch; routedvlm_audit_bound{router, side, on}: the upper bound (on the regret: on the
disagreement until gold arrives) and the lower bound on the regret; routedvlm_audit_alpha{router}: the certified
limit; routedvlm_audit_status{router, status}: 1 for the current status (holding, unproven, violated), else 0.
"""
from __future__ import annotations

from .monitor import STATUSES


class AuditCollector:
    """A prometheus_client collector over `snapshot()` (the monitor's snapshot dict, or None when not auditing)."""

    def __init__(self, snapshot):
        self.snapshot = snapshot

    def describe(self):
        return []

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        snap = self.snapshot()
        if not snap:
            return
        router = snap["router"]
        done = CounterMetricFamily("routedvlm_audits", "Shadow audits by result (done, skipped, failed).",
                                   labels=["router", "result"])
        for result, key in (("done", "audits"), ("skipped", "skipped"), ("failed", "failed")):
            done.add_metric([router, result], snap[key])
        yield done
        rate = GaugeMetricFamily("routedvlm_audit_disagreement_rate", "Disagreement rate of the current epoch's audits.",
                                 labels=["router"])
        rate.add_metric([router], snap["disagreement_rate"] if snap["disagreement_rate"] is not None else float("nan"))
        yield rate
        bound = GaugeMetricFamily("routedvlm_audit_bound", "Anytime-valid bounds on the regret rate.",
                                  labels=["router", "side", "on"])
        bound.add_metric([router, "upper", snap["bound_on"]], snap["upper_bound"])
        bound.add_metric([router, "lower", "regret"], snap["lower_bound"])
        yield bound
        alpha = GaugeMetricFamily("routedvlm_audit_alpha", "The certified limit on the regret rate.", labels=["router"])
        alpha.add_metric([router], snap["alpha"])
        yield alpha
        status = GaugeMetricFamily("routedvlm_audit_status", "1 for the audit's current status.", labels=["router", "status"])
        for name in STATUSES:
            status.add_metric([router, name], float(snap["status"] == name))
        yield status


def register(registry, snapshot) -> None:
    registry.register(AuditCollector(snapshot))
