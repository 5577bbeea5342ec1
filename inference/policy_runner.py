"""Run a routing policy on one request: the stages the router needs, its features, the decision, the answer.

cascade: `large_direct` first (and `small_direct` beside it when a feature needs it), then the decision,
then accept one of those answers, escalate with the large model's prefix cache reused (`pipeline.escalate`),
or run another strategy. On a ladder of N models the cascade climbs it: it pays the `<m>_direct` stages its policy
needs, cheapest first, then accepts one of the paid answers or runs another strategy. one-shot: prompt features,
decision, the chosen strategy alone. Every stage record names the model (alias) that ran it; `RoutedOutput.models`
lists them and `answer_model` is the one whose answer is returned.
A router that raises at decision time never fails the request: the fallback router decides instead, and the
router's `RouterHealth` counts it (unhealthy after consecutive failures, each cause logged once). Its scoring runs
under `decision_timeout` seconds (decision_deadline.py): one that overruns is answered by the fallback and leaves
the router unhealthy (stalled) until it returns, without holding the request. A router whose decision is bounded by
construction (`Router.bounded_decision`: LightGBM's checked trees, the fixed rules) decides in the request's thread.
`run(..., max_tokens=, on_decision=, sink=)` caps the final answer, reports the route (and the models it runs) as
soon as it is decided, and streams the final answer into an `AnswerSink` as it decodes.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

from routedvlm.router.decision_rules import uses_model
from routedvlm.router.ladder import next_action, stages_to_pay
from routedvlm.router.strategies import alias_rank, is_alias, parse_strategy

from . import final_answer, streaming
from . import sampling as sampling_mod
from .decision_deadline import DecisionDeadline
from .encoders import encoder_for_policy
from .encoders.state import state_for_policy
from .features import compute_features
from .pipeline_parts import Result
from .threads import parallel
from .router_health import RouterHealth

_TIME_KEYS = ("vision_ms", "prefill_ms", "prefill_tokens", "cached_tokens", "decode_ms", "decode_tokens")


@dataclass
class RoutedOutput:
    """What RoutedVLM returns for one request.

    text: the answer; strategy: the strategy that produced it; keep_tokens: the decision's K for
    `transfer_<K>` (None otherwise, also for `transfer_all`); p_correct: the router's P(correct) per
    candidate; trace: the stage records that ran (see `stages.record`) plus one `stage: "decision"` record
    (router type, mode, features, `features_ms`, `decision_ms`, `fallback`, `error`); fallback: whether the
    fallback router decided; result: the pipeline's `Result` of the chosen strategy; finish_reason: "length"
    when `max_tokens` (or the pipeline's limit) cut the answer, else "stop"; usage: the OpenAI usage of the final
    answer call (see final_answer.py); request_id / audited: the id for gold feedback and whether a shadow audit of
    the request was queued (see audit/).
    """

    text: str
    strategy: str
    keep_tokens: int | None
    p_correct: dict
    trace: list
    fallback: bool = False
    result: Result | None = field(default=None, repr=False)
    finish_reason: str = "stop"
    usage: dict = field(default_factory=dict)
    request_id: str = ""  # set by RoutedVLM; the id gold feedback names
    audited: bool = False  # whether a shadow audit of this request was queued

    @property
    def models(self) -> list[str]:
        """The models (ladder aliases) that ran a stage of this request, cheapest first."""
        return ladder_order(r["model"] for r in self.trace if r.get("stage") != "decision" and r.get("model"))

    @property
    def answer_model(self) -> str:
        """The model (ladder alias) whose answer this is."""
        return parse_strategy(self.strategy).model

    @property
    def decision(self) -> dict:
        return next(r for r in self.trace if r["stage"] == "decision")

    @property
    def latency_ms(self) -> float:
        """Model time (vision + prefill + decode of every stage) plus routedvlm's overhead (`overhead_ms`)."""
        return sum(r["vision_ms"] + r["prefill_ms"] + r["decode_ms"] for r in self.trace) + self.overhead_ms

    @property
    def overhead_ms(self) -> float:
        """routedvlm's own time in this request (everything that is not a model call), as the trace records it."""
        d = self.decision
        return d["overhead_ms"] if "overhead_ms" in d else d["features_ms"] + d["decision_ms"]

    def to_dict(self) -> dict:
        return {"text": self.text, "strategy": self.strategy, "keep_tokens": self.keep_tokens,
                "p_correct": dict(self.p_correct), "fallback": self.fallback, "finish_reason": self.finish_reason,
                "usage": dict(self.usage), "models": self.models, "answer_model": self.answer_model,
                "trace": [dict(r) for r in self.trace]}


class PolicyRunner:
    """Executes `router`'s policy with `pipeline`; `fallback` decides when `router` is None or raises."""

    def __init__(self, pipeline, router, fallback, *, router_error: str | None = None, health: RouterHealth | None = None,
                 decision_timeout: float | None = 10.0):
        self.pipeline, self.router, self.fallback = pipeline, router, fallback
        self.router_error = router_error
        name = router.policy.router_type if router is not None else "(not loaded)"
        self.deadline = DecisionDeadline(decision_timeout)
        self.health = health or RouterHealth(name, load_error=router_error if router is None else None)
        self.health.stalled = self.deadline.stalled

    # ---- stages ----
    @staticmethod
    def stages_for(router) -> list[str]:
        """The answering stages to run before deciding, in order (`router.ladder.stages_to_pay`): for a pair's policy
        `large_direct` then `small_direct`; on a ladder the `<m>_direct` stages the policy pays, cheapest model first."""
        return stages_to_pay(router)

    def _run_stages(self, req, names, ran: dict) -> dict:
        pipe = self.pipeline
        jobs = {n: (lambda n=n: pipe.run_strategy(req, parse_strategy(n))) for n in names if n not in ran}
        ran.update(parallel(jobs, pipe.concurrent))
        return ran

    # ---- decision ----
    def _decide(self, router, req, ran, deadline=None):
        """The policy's decision once its stages are paid (`router.ladder.next_action`, which answers when nothing is
        left to pay): (decision, features, features ms, decision ms). `deadline`: a DecisionDeadline the router's
        scoring runs under (features and model-based inputs are model calls, under the request's own deadline)."""
        t0 = time.perf_counter()
        images = [] if req.image is None else [req.image]  # a text-only chat: image features say there is no image
        if router.policy.params.get("encoder"):  # meaning features: the encoder the router names, loaded once, verified
            encoder_for_policy(router.policy.params)
        if router.policy.params.get("state"):  # the small VLM's state features, registered (attach_router verified)
            state_for_policy(router.policy.params)
        feats = compute_features(req.question, images, {n: ran[n] for n in ran}, names=router.policy.decision_features)
        t1 = time.perf_counter()
        extra = router.runtime_inputs(req, ran, self.pipeline) if uses_model(router.policy.decision_rule) else {}
        inputs, paid = {**feats, **extra}, list(ran)
        bounded = deadline is None or router.bounded_decision  # e.g. checked LightGBM trees: no worker thread handoff
        step = (_now if bounded else deadline.call)(lambda: next_action(router, inputs, paid=paid))
        if step.kind != "answer":  # the stages ran above: only a router whose stages changed meanwhile gets here
            raise RuntimeError(f"the policy asks for stage {step.stage!r} after its stages ran")
        t2 = time.perf_counter()
        return step.decision, feats, (t1 - t0) * 1000, (t2 - t1) * 1000

    def run(self, req, *, max_tokens: int | None = None, on_decision=None, sink=None, sampling=None) -> RoutedOutput:
        """Answer one Request. max_tokens: cap of the final answer; on_decision(decision, fallback, models, decoded):
        called once the route is decided, before the final answer runs (`models`: the aliases the request runs,
        cheapest first; `decoded`: whether the answer was already decoded before the decision, an accepted cascade
        answer); sink: an `AnswerSink` the final answer streams into; sampling: a `sampling.Sampling` the final answer
        call samples with (the stages run before the decision stay greedy). The decision record's `overhead_ms` is
        this call's wall time minus the time inside model calls and `on_decision`: routedvlm's own work."""
        t_start, away = time.perf_counter(), _Stopwatch()
        ran: dict[str, Result] = {}
        router, error, used_fallback = self.router, self.router_error, self.router is None
        if router is not None:
            with away:
                self._run_stages(req, self.stages_for(router), ran)  # a model failure here is not the router's
            try:
                decision, feats, f_ms, d_ms = self._decide(router, req, ran, self.deadline)
                self.health.success()
            except Exception as exc:  # a router must never fail the request
                error = self.health.failure(exc)
                router, used_fallback = None, True
        if router is None:
            router = self.fallback
            with away:
                self._run_stages(req, self.stages_for(router), ran)
            decision, feats, f_ms, d_ms = self._decide(router, req, ran)
        decoded = decision.strategy in ran  # accepted: decoded (greedily) before the decision, so not sampled
        if on_decision is not None:
            with away:
                on_decision(decision, used_fallback, _route_models(ran, decision.strategy), decoded)
        with away, streaming.active(sink) if sink is not None else contextlib.nullcontext(), sampling_mod.active(sampling):
            result = self._execute(req, decision.strategy, ran)
        text, finish, usage = final_answer.finish(self.pipeline, result, max_tokens, None if decoded else sampling)
        record = _decision_record(router, decision, feats, f_ms, d_ms, used_fallback, error)
        record.update(router.trace_info())  # e.g. the LoRA probe's probe_shared_prefill, probe_ms
        record["sampled"] = sampling is not None and not sampling.neutral and not decoded
        record["decoded_before_route"] = decoded
        out = RoutedOutput(text, decision.strategy, decision.keep_tokens, dict(decision.p_correct),
                           _trace(ran, result, record), used_fallback, result, finish, usage)
        record["overhead_ms"] = round((time.perf_counter() - t_start - away.seconds) * 1000, 4)
        return out

    def _execute(self, req, strategy: str, ran: dict) -> Result:
        """The chosen strategy's Result, reusing the stages that already ran."""
        if strategy in ran:
            return ran[strategy]
        strat = parse_strategy(strategy)
        paid = ran.get(f"{strat.model}_direct")
        if strat.is_transfer and paid is not None:  # two-stage: the answering model continues its paid prefix
            return self.pipeline.escalate(paid, strat.keep_tokens, source=strat.source)
        return self.pipeline.run_strategy(req, strat)


class _Stopwatch:
    """Sums the time spent inside its `with` blocks (model calls: not routedvlm's overhead)."""

    def __init__(self):
        self.seconds, self._t0 = 0.0, 0.0

    def __enter__(self):
        self._t0 = time.perf_counter()

    def __exit__(self, *exc):
        self.seconds += time.perf_counter() - self._t0


def _now(fn):
    return fn()


def ladder_order(aliases) -> list[str]:
    """Distinct model aliases, cheapest first (a name that is not an alias last, in the order given)."""
    names = list(dict.fromkeys(aliases))
    return sorted(names, key=lambda a: (0, alias_rank(a)) if is_alias(a) else (1, names.index(a)))


def _route_models(ran: dict, strategy: str) -> list[str]:
    """The models a route runs: those of the stages paid before deciding and those of the chosen strategy."""
    paid = (r.get("model") for res in ran.values() for r in res.trace)
    return ladder_order([*(m for m in paid if m), *parse_strategy(strategy).models])


def _decision_record(router, decision, feats, features_ms, decision_ms, fallback, error) -> dict:
    return {
        "stage": "decision", "model": None, "router_type": router.policy.router_type, "mode": router.policy.mode,
        "strategy": decision.strategy, "keep_tokens": decision.keep_tokens, "reason": decision.reason,
        "features": {k: float(v) for k, v in feats.items()}, "features_ms": round(features_ms, 4),
        "decision_ms": round(decision_ms, 4), "fallback": fallback, "error": error,
        **{k: 0 for k in _TIME_KEYS},
    }


def _trace(ran: dict, result: Result, decision: dict) -> list:
    """Stage records of the stages run before deciding, the decision, then the records the answer added."""
    before = [r for res in ran.values() for r in res.trace]
    seen = {id(r) for r in before}
    after = [r for r in result.trace if id(r) not in seen]
    return [*before, decision, *after]
