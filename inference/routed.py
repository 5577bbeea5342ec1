"""`RoutedVLM`: the drop-in runtime — a small and a large VLM (or a ladder of N models, cheapest first) run under a
routing policy (router).

The router comes from a folder, an MLflow `models:/name@alias` URI, `"mutual-verification"`, a strategy
id, or a loaded `Router`. A router that fails to load or raises never fails a request: the fallback
policy (default mutual verification) answers, the cause is logged once, the trace's decision record says so,
and `health()` reports a router that failed to load or fails on every decision.
Each question goes through the prompt template the router's labels were made with (`policy.prompt_template`,
see `prompts.PromptTemplate`), so the models and the features see the text the labeller used.
"""
from __future__ import annotations

import contextlib
import logging
import threading
from dataclasses import fields

from routedvlm.errors import ConfigError, InputError
from routedvlm.router.strategies import DEFAULT_K_GRID
from routedvlm.router.tracking import CHAMPION_ALIAS, DEFAULT_MODEL_NAME

from .inputs import make_request
from .pipeline_parts import PipelineConfig, pipeline_sides
from .checkpoint_check import check_checkpoints
from .policy_runner import PolicyRunner, RoutedOutput
from .request_ids import request_id as new_request_id
from .streaming import RoutedStream

logger = logging.getLogger(__name__)
DEFAULT_ROUTER = f"models:/{DEFAULT_MODEL_NAME}@{CHAMPION_ALIAS}"
DEFAULT_FALLBACK = "mutual-verification"
__all__ = ["DEFAULT_FALLBACK", "DEFAULT_ROUTER", "RoutedOutput", "RoutedVLM", "pipeline_sides"]


def attach_router(router, pipeline):
    """Check that `router`'s strategies and stages run only models of the pipeline's ladder, let it check the
    pipeline it will run on (`router.attach`) and switch on what it reads at run time: the large model's hidden-state
    capture for a router with `hidden_layers` (the self-probe); the encoder of a router on meaning features (loaded
    and its weights' hash checked)."""
    check_ladder_fits(router, pipeline)
    router.attach(pipeline)
    if router.policy.params.get("encoder"):  # meaning features: load and verify the router's encoder now, not per request
        from .encoders import encoder_for_policy

        encoder_for_policy(router.policy.params)
    if router.policy.params.get("state"):  # the small VLM's state: same small weights, capture switched on
        from .encoders.state import state_for_policy

        state_for_policy(router.policy.params, pipeline.small)
    layers = router.hidden_layers
    if layers:
        pipeline.large.capture_hidden(layers)
    return router


def check_ladder_fits(router, pipeline) -> None:
    """ConfigError unless every model `router` may run (its strategies, the stages it pays) is on `pipeline`'s ladder.
    A pair's router runs on any ladder (its `small` and `large` are the ends)."""
    from routedvlm.router.strategies import parse_strategy

    have = list(pipeline_sides(pipeline))
    policy = router.policy
    used = {m for s in [*policy.strategies, *router.required_stages] for m in parse_strategy(s).models}
    missing = sorted(used - set(have))
    if missing:
        ladder = list(getattr(policy, "ladder", None) or ())
        of = f" of the ladder {ladder}" if ladder else ""
        raise ConfigError(f"The router runs model(s) {missing}{of}, but this RoutedVLM's models are {have}. Load it "
                          f"with {len(ladder) if ladder else 'more'} models, cheapest first, or use a router of this "
                          "ladder.")


def _load_fallback(fallback):
    from routedvlm.router import Router, load_router

    if isinstance(fallback, Router):
        return fallback
    try:
        return load_router(fallback)
    except Exception as exc:
        raise ConfigError(
            f"The `fallback` parameter of RoutedVLM must be a router that always loads: 'mutual-verification' "
            f"(also 'mutual-verification:<K>'), a strategy id such as 'large_direct', or a Router. "
            f"Got {fallback!r} ({exc})."
        ) from None


class RoutedVLM:
    """A CollaborativePipeline (a pair, or a ladder of N models) run under a router.

    `generate(image=..., question=...)` / `generate(messages=[...])` / `vlm(...)` return a `RoutedOutput`
    (`image=None`, or messages without an image part, is a text-only chat); `stream(...)` yields the answer's
    text as it decodes (a `RoutedStream`); lists of inputs return a list (processed one after another: the models are
    shared, so requests are serialised by a lock; a server may call one RoutedVLM from many threads; when every side
    is remote (`VLM.from_openai`) there is no lock and requests run concurrently). `out.models` names the models
    (ladder aliases) that ran, `out.answer_model` the one that answered.
    `prompt_template`: None (default) applies the router's (the one its labels were made with; none for rules
    and fixed strategies), or 'none', 'lmms-eval', a format string with {question}, or a PromptTemplate.
    `audit_rate` p > 0: a uniformly random fraction p of requests also runs the certificate's reference strategy in
    the background, and `audit_status()` says whether the certified promise holds on this traffic (`audit`: an
    `AuditConfig` or a dict of its fields: log, store_inputs, alpha, delta, window, ...; see docs/audit.md).
    Attributes: `pipeline`, `router` (None when it failed to load), `fallback`, `router_error`, `prompt_template`,
    `auditor` (None when not auditing), `replica_id` (None; `routedvlm serve --replica-id` names the process, and
    its request ids carry it: `request_ids.py`).
    `decision_timeout`: seconds the router's scoring may take (default 10; None: no limit); one that overruns is
    answered by the fallback and the router reports unhealthy in `health()` until it returns.
    A router that records the checkpoints it was trained on (`policy.checkpoints`) is refused (router_error, the
    fallback answers) on other checkpoints unless `allow_checkpoint_mismatch=True` (inference/checkpoint_check.py).
    """

    replica_id: str | None = None

    def __init__(self, pipeline, router=DEFAULT_ROUTER, *, fallback=DEFAULT_FALLBACK, tracking_uri: str | None = None,
                 prompt_template=None, audit_rate: float = 0.0, audit=None, decision_timeout: float | None = 10.0,
                 allow_checkpoint_mismatch: bool = False):
        from routedvlm.router import load_router

        from .prompts import PromptTemplate

        self.pipeline = pipeline
        self.fallback = _load_fallback(fallback)
        try:
            check_ladder_fits(self.fallback, pipeline)
        except ConfigError as exc:
            raise ConfigError(f"The `fallback` parameter of RoutedVLM must run on this RoutedVLM's models: {exc}") from None
        self.router, self.router_error = None, None
        template = None
        try:
            loaded = attach_router(load_router(router, tracking_uri=tracking_uri), pipeline)
            check_checkpoints(loaded, pipeline_sides(pipeline), allow_mismatch=allow_checkpoint_mismatch)
            if prompt_template is None:  # the router's recorded template: a bad one fails the router, not the caller
                template = PromptTemplate.parse(getattr(getattr(loaded, "policy", None), "prompt_template", None))
            self.router = loaded
        except Exception as exc:
            self.router_error = f"{type(exc).__name__}: {exc}"
            logger.warning("router %r failed to load (%s); every request uses the fallback %s",
                           str(router), self.router_error, self.fallback.policy.router_type)
        self.router_source = str(router)
        self.prompt_template = template or PromptTemplate.parse(prompt_template)
        self.runner = PolicyRunner(pipeline, self.router, self.fallback, router_error=self.router_error,
                                   decision_timeout=decision_timeout)
        stateful = any(side.stateful for side in pipeline_sides(pipeline).values())
        self.lock = threading.RLock() if stateful else contextlib.nullcontext()  # e.g. HTTP sides keep no model state
        self.auditor = _auditor(self, audit_rate, audit)

    @classmethod
    def from_pretrained(cls, small, large=None, router=DEFAULT_ROUTER, *, fallback=DEFAULT_FALLBACK,
                        tracking_uri: str | None = None, selector: str = "prefix", k_grid=DEFAULT_K_GRID,
                        config: PipelineConfig | None = None, prompt_template=None, audit_rate: float = 0.0, audit=None,
                        decision_timeout: float | None = 10.0, allow_checkpoint_mismatch: bool = False,
                        **kwargs) -> "RoutedVLM":
        """Load the models and the router: `from_pretrained(small, large, router)` for a pair, or
        `from_pretrained([m0, m1, m2, ...], router)` for a ladder of N >= 2 models, cheapest first (named by position
        `small`, `mid`, `large` for three; `small`, `mid1` ... `large` beyond; a list of two is the pair).

        Each model: a checkpoint path or hub id (loaded with `VLM.from_pretrained`), a `ModelSide` (`VLM`, ...), or
        '<base_url>#<model id>' for a model behind an OpenAI-compatible server (`VLM.from_openai`; API key from
        $ROUTEDVLM_BACKEND_API_KEY); a ladder may mix them.
        router: a router folder, `models:/name@alias` (default `models:/vlm-router@champion` in the
        default tracking store, see `routedvlm.router.tracking`), `models:/name/version`, `runs:/...`,
        `"mutual-verification"`, a strategy id (fixed policy), or a loaded Router.
        prompt_template: see the class docstring (default: the router's).
        kwargs: PipelineConfig fields (`max_direct_tokens`, `max_reason_tokens`, `min_new_tokens`,
        `min_reason_tokens`); the rest go to `VLM.from_pretrained` of every local model (`device`, default "auto":
        CUDA when present; `dtype`, ...).
        """
        from .sides import load_sides

        specs, router = _model_list(small, large, router)
        names = {f.name for f in fields(PipelineConfig)}
        cfg_kw = {k: kwargs.pop(k) for k in list(kwargs) if k in names}
        if config is not None and cfg_kw:
            raise ConfigError(f"Pass either `config` or PipelineConfig fields {sorted(cfg_kw)}, not both.")
        pipe = _pipeline(load_sides(specs, **kwargs), selector=selector, k_grid=k_grid,
                         config=config or PipelineConfig(**cfg_kw))
        return cls(pipe, router, fallback=fallback, tracking_uri=tracking_uri, prompt_template=prompt_template,
                   audit_rate=audit_rate, audit=audit, decision_timeout=decision_timeout,
                   allow_checkpoint_mismatch=allow_checkpoint_mismatch)

    @property
    def active_router(self):
        """The router that decides requests: the loaded one, or the fallback when it failed to load."""
        return self.router if self.router is not None else self.fallback

    def generate(self, image=None, question=None, *, messages=None, max_tokens: int | None = None,
                 defer_audit: bool = False, sampling=None):
        """Answer one request, or a list of requests (lists of images + questions, or a list of message lists).

        messages: chat messages whose last user turn holds the question and at most one image part, as
        transformers writes them (`{"type": "image", "image": PIL | path}`, `{"type": "image", "url": ...}`) or
        as OpenAI does (`{"type": "image_url", "image_url": {"url": "data:..." | path}}`).
        max_tokens: cap of the final answer's tokens (`finish_reason` "length" when it cuts); the reasoning of a strategy
        has its own budget (`PipelineConfig.max_reason_tokens`, the router's K).
        sampling: a `sampling.Sampling` the call writing the answer samples with (routing stages stay greedy; an
        answer a cascade accepted was decoded greedily before the decision; see docs/serve.md)
        defer_audit: a sampled shadow audit waits until `out.release_audit()` (the server calls it once the
        response is sent; it runs anyway after a minute)."""
        _check_max_tokens(max_tokens)
        if isinstance(image, (list, tuple)) or _is_batch(messages):
            return [self.run_request(self._request(**kw), max_tokens=max_tokens, sampling=sampling)
                    for kw in _split_batch(image, question, messages)]
        return self.run_request(self._request(image, question, messages), max_tokens=max_tokens,
                                defer_audit=defer_audit, sampling=sampling)

    __call__ = generate

    def stream(self, image=None, question=None, *, messages=None, max_tokens: int | None = None,
               sampling=None) -> RoutedStream:
        """One request whose final answer streams as it decodes: `for delta in vlm.stream(...)`, then `.output`.

        The route is decided before the first answer token; an answer the cascade accepted (already decoded
        before the decision) arrives as one delta. Inputs as for `generate` (one request, not a batch)."""
        _check_max_tokens(max_tokens)
        return RoutedStream(self, self._request(image, question, messages), max_tokens, sampling)

    def _request(self, image=None, question=None, messages=None):
        """A validated Request whose question went through the router's prompt template."""
        req = make_request(image, question, messages)
        req.user_question = req.question  # what an audit log stores (relabelling applies the template again)
        req.__dict__["_session"] = new_request_id(self.replica_id)  # every call of this request sends it (sides/http/side.py)
        req.question = self.prompt_template.apply(req.question)
        return req

    def run_request(self, req, *, defer_audit: bool = False, request_id: str | None = None, audit_draw=None,
                    **kwargs) -> RoutedOutput:
        """Answer a prepared request (template applied) under the lock; kwargs go to `PolicyRunner.run`
        (`max_tokens`, `on_decision`, `sink`, `sampling`). A sampled shadow audit is queued after the lock is released
        (`defer_audit`: see `generate`; `audit_draw`: the draw made beforehand, see `streaming.RoutedStream`)."""
        with self.lock:
            out = self.runner.run(req, **kwargs)
        out.request_id = request_id or req.__dict__.get("_session") or new_request_id(self.replica_id)
        if self.auditor is not None and not out.decision.get("sampled"):  # a sampled answer is outside the certificate
            # after the lock is released: the audit waits for it, the answer does not
            out.audited = self.auditor.offer(out.request_id, req, out, defer=defer_audit, drawn=audit_draw)
        return out

    def audit_feedback(self, request_id: str, *, answer=None, routed_correct=None, reference_correct=None) -> str:
        """Gold for an audited request (`out.request_id` of an output with `out.audited`): the correct `answer`, or
        whether the routed and the reference answers were correct. Turns the bound on disagreement into a bound on
        the regret; returns the audit status ('holding', 'unproven' or 'violated')."""
        if self.auditor is None:
            raise ConfigError("This RoutedVLM does not audit (audit_rate=0); there is nothing to give feedback to.")
        return self.auditor.feedback(request_id, answer=answer, routed_correct=routed_correct,
                                     reference_correct=reference_correct)

    def audit_status(self) -> dict | None:
        """The live statement (status, bounds, counts), or None when not auditing. See docs/audit.md."""
        return None if self.auditor is None else self.auditor.monitor.snapshot()

    def health(self) -> dict:
        """The router's state: loaded, healthy (False after consecutive failed decisions), error, counts; `models`:
        alias -> name of every model of the ladder, cheapest first."""
        router = self.active_router
        state = {"router_type": router.policy.router_type, "mode": router.policy.mode,
                 "router_fallback": self.router is None, **self.runner.health.snapshot(),
                 "models": {alias: side.name for alias, side in pipeline_sides(self.pipeline).items()}}
        return state if self.auditor is None else {**state, "audit": self.audit_status()}

    def start(self) -> None:
        """Start every model of the ladder now (`ModelSide.start`: an engine side builds its engine), not on the
        first request."""
        self.pipeline.start()

    def close(self) -> None:
        """Stop the shadow auditor (after the audits queued) and close every model (`ModelSide.close`: engine
        processes end now). `with RoutedVLM.from_pretrained(...) as routed:` starts and closes them."""
        if self.auditor is not None:
            self.auditor.close()
        self.pipeline.close()

    def __enter__(self) -> "RoutedVLM":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        models = ", ".join(f"{alias}={side.name!r}" for alias, side in pipeline_sides(self.pipeline).items())
        return f"RoutedVLM({models}, router={self.active_router!r}, fallback={self.fallback.policy.router_type!r})"


def _model_list(small, large, router):
    """(the list of model specs, the router) of `from_pretrained`'s arguments: `(small, large, router)` or
    `([m0, m1, ...], router)` (the router may come second)."""
    if isinstance(small, (list, tuple)):
        if large is not None:
            if router is not DEFAULT_ROUTER:
                raise ConfigError("RoutedVLM.from_pretrained takes a list of models and then the router: "
                                  "`from_pretrained([m0, m1, m2], router)`. Got a list, a second model or router "
                                  f"{large!r}, and router {router!r}; put every model in the list.")
            router = large
        return list(small), router
    if large is None:
        raise ConfigError("RoutedVLM.from_pretrained needs the models: `from_pretrained(small, large, router)` or a "
                          "list cheapest first, `from_pretrained([m0, m1, m2], router)`. Got one model and no `large`.")
    return [small, large], router


def _pipeline(sides, **kwargs):
    """A CollaborativePipeline of 2 sides (the pair) or more (a ladder)."""
    from .pipeline import CollaborativePipeline

    return CollaborativePipeline(sides=sides, **kwargs)


def _auditor(routed, rate, audit):
    """The ShadowAuditor for `audit_rate` / `audit` (an AuditConfig, or a dict of its fields), or None."""
    if not rate and audit is None:
        return None
    from .audit.hook import AuditConfig, make_auditor

    cfg = audit if isinstance(audit, AuditConfig) else AuditConfig(**(audit or {}))
    if rate:
        cfg.rate = rate
        cfg.__post_init__()
    return make_auditor(routed, cfg)


def _check_max_tokens(max_tokens) -> None:
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens <= 0):
        raise InputError(f"The `max_tokens` parameter must be a positive integer or None. Got {max_tokens!r} instead.")


def _is_batch(messages) -> bool:
    return isinstance(messages, (list, tuple)) and bool(messages) and isinstance(messages[0], (list, tuple))


def _split_batch(image, question, messages) -> list[dict]:
    if messages is not None:
        if image is not None or question is not None:
            raise InputError("Pass either `messages` or (`image`, `question`), not both.")
        return [{"messages": list(m)} for m in messages]
    images = list(image)
    questions = list(question) if isinstance(question, (list, tuple)) else [question] * len(images)
    if len(questions) != len(images):
        raise InputError(
            f"A batch needs one question per image: got {len(images)} images and {len(questions)} questions. "
            "Pass lists of equal length, or one question string for all images."
        )
    return [{"image": i, "question": q} for i, q in zip(images, questions)]
