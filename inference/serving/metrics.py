"""Prometheus metrics of `routedvlm serve` (`GET /metrics`, text format), kept in a registry of its own.

routedvlm_requests_total{route, model, strategy, status}: answered requests (route = HTTP path, model = the
requested model id, strategy = the strategy that answered, "" when none ran, status = HTTP status);
routedvlm_request_duration_seconds{model, strategy}: end-to-end time of answered requests;
routedvlm_stage_duration_seconds{stage, model}: vision + prefill + decode time of each stage (stage
"decision": features + router); routedvlm_fallbacks_total{reason}: requests the fallback policy decided
(router_not_loaded, decision_failed); routedvlm_router_errors_total{error}: failed decisions by exception;
routedvlm_requests_in_flight; routedvlm_tokens_total{model, kind}: prompt / completion tokens;
routedvlm_model_runs_total{model}: answered requests in which a model of the ladder (its alias: small, mid, large,
...) ran at least one stage; routedvlm_answers_total{model}: answered requests whose final answer that model gave;
routedvlm_overhead_seconds: routedvlm's own time per answered request (features, decision, bookkeeping: the
request's wall time minus its model calls; the trace's `overhead_ms`), in buckets from 50 us;
routedvlm_ready and routedvlm_router_healthy (1/0, read at scrape time); routedvlm_replica_info{replica} (1, with
`--replica-id`). vLLM-named series beside them: vllm_metrics.py. Every series is this process's own: behind several
replicas Prometheus scrapes each pod and `sum without (instance, pod, replica)` adds them up (counters and histogram
buckets sum; the gauges sum to ready replicas and requests in flight over the fleet).
"""
from __future__ import annotations

OVERHEAD_BUCKETS = (0.00005, 0.0001, 0.0002, 0.0003, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05, 0.25)
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class ServerMetrics:
    """The server's metrics; `ready()` and `router_healthy()` are callables read at every scrape."""

    def __init__(self, ready, router_healthy, replica: str | None = None):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = r = CollectorRegistry(auto_describe=True)
        self.requests = Counter("routedvlm_requests", "Answered requests.", ["route", "model", "strategy", "status"], registry=r)
        self.duration = Histogram("routedvlm_request_duration_seconds", "End-to-end time of answered requests.",
                                  ["model", "strategy"], buckets=LATENCY_BUCKETS, registry=r)
        self.stage = Histogram("routedvlm_stage_duration_seconds", "Vision + prefill + decode time of a stage.",
                               ["stage", "model"], buckets=LATENCY_BUCKETS, registry=r)
        self.overhead = Histogram("routedvlm_overhead_seconds", "routedvlm's own time per answered request: wall time "
                                  "minus model calls (features, decision, bookkeeping).", buckets=OVERHEAD_BUCKETS,
                                  registry=r)
        self.fallbacks = Counter("routedvlm_fallbacks", "Requests decided by the fallback policy.", ["reason"], registry=r)
        self.router_errors = Counter("routedvlm_router_errors", "Failed router decisions.", ["error"], registry=r)
        self.in_flight = Gauge("routedvlm_requests_in_flight", "Requests being answered now.", registry=r)
        self.tokens = Counter("routedvlm_tokens", "Prompt and completion tokens of answered requests.",
                              ["model", "kind"], registry=r)
        self.model_runs = Counter("routedvlm_model_runs", "Answered requests in which the model (ladder alias) ran.",
                                  ["model"], registry=r)
        self.answers = Counter("routedvlm_answers", "Answered requests whose final answer the model (ladder alias) gave.",
                               ["model"], registry=r)
        from .vllm_metrics import VLLMMetrics

        self.vllm = VLLMMetrics(r, self.in_flight, LATENCY_BUCKETS)  # vllm:* names beside these (docs/serve.md)
        Gauge("routedvlm_ready", "1 once both models and the router are loaded.", registry=r).set_function(
            lambda: float(bool(ready())))
        Gauge("routedvlm_router_healthy", "1 while the router loads and decides; 0 when the fallback answers every "
              "request.", registry=r).set_function(lambda: float(bool(router_healthy())))
        if replica is not None:
            Gauge("routedvlm_replica_info", "1; the replica label names this process (routedvlm serve --replica-id).",
                  ["replica"], registry=r).labels(replica).set(1)

    def request(self, route: str, model: str, strategy: str, status: int, seconds: float | None = None) -> None:
        self.requests.labels(route, model, strategy, str(status)).inc()
        if seconds is not None:
            self.duration.labels(model, strategy).observe(seconds)
            self.vllm.finished(model, seconds)

    def answered(self, model: str, trace: list, usage: dict, *, fallback: bool = False, loaded: bool = True,
                 answered_by: str | None = None, finish_reason: str | None = None) -> None:
        """Record the stages, tokens and any fallback of one answered request; the models that ran (the trace's
        `model`s) and the one that answered (`answered_by`, an alias)."""
        for rec in trace:
            if rec.get("stage") == "decision":
                self.stage.labels("decision", "router").observe((rec["features_ms"] + rec["decision_ms"]) / 1000)
                if rec.get("overhead_ms") is not None:
                    self.overhead.observe(rec["overhead_ms"] / 1000)
                if fallback:
                    self.fallbacks.labels("decision_failed" if loaded else "router_not_loaded").inc()
                if fallback and loaded and rec.get("error"):
                    self.router_errors.labels(rec["error"].split(":", 1)[0]).inc()
            elif rec.get("model"):
                ms = rec["vision_ms"] + rec["prefill_ms"] + rec["decode_ms"]
                self.stage.labels(rec["stage"], rec["model"]).observe(ms / 1000)
        for alias in dict.fromkeys(rec["model"] for rec in trace if rec.get("stage") != "decision" and rec.get("model")):
            self.model_runs.labels(alias).inc()
        if answered_by:
            self.answers.labels(answered_by).inc()
        self.tokens.labels(model, "prompt").inc(usage.get("prompt_tokens", 0))
        self.tokens.labels(model, "completion").inc(usage.get("completion_tokens", 0))
        self.vllm.answered(model, usage, finish_reason)

    def render(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST
