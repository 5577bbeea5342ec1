"""An OpenAI-compatible chat-completions server for RoutedVLM (FastAPI): /v1/chat/completions and /v1/completions
(streamed or not; text_completions.py), vLLM's other routes (vllm_routes.py: /v1/models, /version, /ping,
/tokenize, ...), and /health, /live, /ready, /metrics and /openapi.json, which need no API key (vLLM protects only the
/v1 routes). Streams: routed_stream.py (the routed model), plain_stream.py (a plain model, token by token); a side's
outage is a 503 + Retry-After and /health names it (side_health.py). /health answers 200 only when the server can answer (as vLLM's); /live answers 200 while it runs.

Model ids: the routed model (default "routedvlm") answers under the router's policy; each model of the ladder
answers alone under its position name ("small", "large"; "small", "mid", "large" for three, ...; see
completions.py). The headers `x-routedvlm-models` / `x-routedvlm-answer-model` and `/metrics` name the models that ran. With `loader=` the models load in the background: the server
listens at once, /ready and the /v1 routes answer 503 until they are loaded. A body is read only up to
`limits.max_body_bytes` (then 413); JSON and image decoding and the model calls run in worker threads, so the
event loop keeps answering probes, on as many threads as requests are admitted (`max_queued`). One lock serialises the calls of local models (they share one device); HTTP sides take no lock. More
than `max_queued` chat requests at once are answered 503 + Retry-After; each request's model calls stop at its
deadline (`request_timeout`, 504). Connection limits and timeouts: guards.py (set up by cli.py); the API key:
auth.py; reading a body and the error a failure becomes: bodies.py.
No `from __future__ import annotations` here: FastAPI reads the handlers' annotations at runtime.
"""
import asyncio
import logging
import threading
import time

from routedvlm.errors import ConfigError

from .. import deadline
from ..audit.metrics import register as register_audit_metrics
from .audit_routes import FEEDBACK, MAX_FEEDBACK_BYTES, feedback, release_after
from .audit_routes import openapi_path as feedback_openapi
from .auth import KeyCheck
from .bodies import api_error, parse_body, read_body, trim_heap
from .calls import choices, run_plain, run_routed
from .completions import merge_choices, routed_completion
from .guards import RETRY_AFTER_S, OncePerInterval, worker_threads
from .metrics import ServerMetrics
from .openapi import ERROR as ERROR_SCHEMA
from .openapi import openapi_document
from .plain_stream import stream_plain
from .replica import ReplicaHeader
from .prompt_check import check_routed_context, special_pattern
from .routed_stream import stream_routed
from .side_health import SideHealth
from .text_completions import TextChunks, text_payload
from .vllm_routes import add_routes
from .protocol import APIError, Limits

logger = logging.getLogger(__name__)
SIDES = ("small", "large")
CHAT = "/v1/chat/completions"
TEXT = "/v1/completions"
PARSE_SLOTS = 2  # request bodies parsed (JSON + images) at the same time
INLINE_PARSE_BYTES = 16 * 2**10  # a body this small with no image in it is parsed on the event loop
TRIM_BYTES = 4 * 2**20  # after parsing a body this large, freed heap pages go back to the OS


class Serving:
    """What the app serves: a RoutedVLM, given or loaded in a background thread by `loader()`."""

    def __init__(self, routed=None, loader=None, on_error=None):
        self.routed, self.loader, self.on_error, self.error = routed, loader, on_error, None
        self._pattern, self._loaded, self.sides = None, False, SideHealth(lambda: self.routed)

    def close(self) -> None:
        """Close what this server loaded (`RoutedVLM.close`: its models' engines); a RoutedVLM given to `create_app`
        stays its owner's to close."""
        if self._loaded and self.routed is not None:
            self.routed.close()

    @property
    def pattern(self):
        """The added-token regex of the served tokenizers (prompt_check.special_pattern), built once."""
        if self._pattern is None and self.routed is not None:
            self._pattern = special_pattern(self.routed) or False
        return self._pattern or None

    def start(self) -> None:
        if self.routed is None and self.loader is not None:
            threading.Thread(target=self._load, daemon=True, name="routedvlm-load").start()

    def _load(self) -> None:
        try:
            routed = self.loader()
            routed.start()  # engines are built before GET /ready answers 200, not inside the first request
            self.routed, self._loaded = routed, True
        except BaseException as exc:  # noqa: BLE001 - reported by /health and by serve's exit status
            self.error = exc
            logger.error("loading the models or the router failed: %s: %s", type(exc).__name__, exc)
            if self.on_error is not None:
                self.on_error(exc)

    def require(self):
        if self.routed is None:
            why = "are still loading; retry once GET /ready answers 200" if self.error is None else "failed to load"
            raise APIError(503, f"The models of this server {why}.", type="server_error", code="model_not_ready")
        return self.routed

    def router_healthy(self) -> bool:
        return self.routed is not None and self.routed.health()["router_healthy"]


def create_app(routed=None, *, loader=None, on_load_error=None, served_model: str = "routedvlm", sides=None,
               api_key: str | None = None, feedback_key: str | None = None, limits: Limits | None = None,
               min_new_tokens: int = 0,
               request_timeout: float | None = 300.0, max_queued: int = 64, replica_id: str | None = None):
    """The FastAPI app serving a RoutedVLM (`routed`, or `loader()` run in the background at startup).
    `sides`: the plain models' ids, the ladder's aliases (default: those of `routed`'s pipeline, or the pair's
    "small", "large" while a `loader` loads); `min_new_tokens` applies to plain-model answers (tiny random models);
    `request_timeout` (seconds, None: none) stops a request's model calls; `max_queued` chat requests at once, 503
    beyond; `feedback_key`: the key POST /v1/audit/feedback needs (None: gold feedback is off, 403); `replica_id`
    names this replica in every response (`x-routedvlm-replica`) and in /metrics."""
    from ..routed import pipeline_sides

    import contextlib

    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response
    from starlette.exceptions import HTTPException

    limits, serving = limits or Limits(), Serving(routed, loader, on_load_error)
    deadlines = deadline.Deadlines(request_timeout)
    aliases = tuple(sides or (pipeline_sides(routed.pipeline) if routed is not None else SIDES))
    if served_model in aliases:
        raise ConfigError(f"The served model name must differ from the plain models' ids {list(aliases)}. "
                          f"Got {served_model!r}.")
    models = (served_model, *aliases)
    metrics = ServerMetrics(lambda: serving.routed is not None, serving.router_healthy, replica_id)
    register_audit_metrics(metrics.registry, lambda: serving.routed.audit_status() if serving.routed is not None else None)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        asyncio.get_running_loop().set_exception_handler(OncePerInterval(60.0))
        worker_threads(asyncio.get_running_loop(), max_queued)  # every admitted request's call can run at once
        serving.start()
        yield
        deadlines.stop()  # whatever still runs (serve stops the model calls earlier: guards.graceful_server)
        serving.close()

    app = FastAPI(title="routedvlm", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.serving, app.state.metrics, app.state.deadlines = serving, metrics, deadlines
    app.add_middleware(KeyCheck, key=api_key, feedback_key=feedback_key)
    if replica_id is not None:
        app.add_middleware(ReplicaHeader, replica=replica_id)

    def error(exc: APIError):
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(HTTPException)
    async def http_error(request, exc):
        return error(APIError(exc.status_code, str(exc.detail), code="not_found" if exc.status_code == 404 else None))

    @app.get("/health")
    async def health():
        if serving.routed is None:
            return JSONResponse({"status": "loading" if serving.error is None else "failed", "ready": False},
                                status_code=503)
        state, failing = serving.routed.health(), serving.sides.snapshot()
        status = "ok" if state["router_healthy"] and not failing else "degraded"
        return {"status": status, "ready": True, **state, "failing_sides": failing}

    @app.get("/live")
    async def live():
        return {"status": "live"}

    @app.get("/openapi.json")
    async def openapi():
        doc = openapi_document(models, api_key is not None)
        doc["paths"][FEEDBACK] = feedback_openapi(ERROR_SCHEMA)
        doc.setdefault("components", {}).setdefault("securitySchemes", {})["feedback"] = {"type": "http",
                                                                                         "scheme": "bearer"}
        return doc

    @app.get("/ready")
    async def ready():
        return JSONResponse({"ready": serving.routed is not None}, status_code=200 if serving.routed is not None else 503)

    @app.get("/metrics")
    async def scrape():
        body, content_type = metrics.render()
        return Response(body, media_type=content_type)

    add_routes(app, serving, served_model, models, limits.max_body_bytes)  # /v1/models, /version, /tokenize, ...

    @app.post(FEEDBACK)
    async def audit_feedback(request: Request):
        try:
            routed = serving.require()
            raw = await read_body(request, MAX_FEEDBACK_BYTES)
        except Exception as exc:  # noqa: BLE001 - 503 while loading, 413, 499: answered in the OpenAI shape
            return error(api_error(exc))
        return await feedback(routed, raw)

    parsing, queued = asyncio.Semaphore(PARSE_SLOTS), [0]

    @app.post(CHAT)
    async def chat(request: Request):
        return await answer(request, CHAT)

    @app.post(TEXT)
    async def text_completion(request: Request):
        return await answer(request, TEXT)

    async def answer(request, route):
        if queued[0] >= max_queued:
            metrics.request(route, "", "", 503)
            exc = APIError(503, f"This server is answering its limit of {max_queued} requests; retry later "
                                "(routedvlm serve --max-queued).", type="server_error", code="server_overloaded")
            return JSONResponse(exc.body(), status_code=503, headers={"retry-after": str(RETRY_AFTER_S)})
        queued[0] += 1
        try:
            handler = ChatHandler(serving, metrics, limits, models, served_model, min_new_tokens, parsing, deadlines,
                                  route)
            return await handler(request)
        finally:
            queued[0] -= 1

    return app


class ChatHandler:
    """One POST /v1/chat/completions: read, parse, answer (streamed or not), and count it in the metrics."""

    def __init__(self, serving, metrics, limits, models, served_model, min_new_tokens, parsing, deadlines, route=CHAT):
        self.require, self.metrics, self.limits, self.models, self.parsing = serving.require, metrics, limits, models, parsing
        self.served, self.min_new_tokens, self.serving, self.deadlines = served_model, min_new_tokens, serving, deadlines
        self.t0, self.model, self.strategy, self.open = time.perf_counter(), "", "", True
        self.route, self.text = route, route == TEXT  # /v1/completions: text_completions.py

    async def __call__(self, request):
        from fastapi.responses import JSONResponse
        from starlette.concurrency import run_in_threadpool

        self.metrics.in_flight.inc()
        streaming, background = False, None
        try:
            routed = self.require()
            req = await self.parse(await read_body(request, self.limits.max_body_bytes))  # no frame here holds the body
            self.model = req.model
            if req.model == self.served:
                check_routed_context(routed, req)
                if req.stream:
                    response = await stream_routed(self, routed, req, *self.chunks)
                    streaming = True
                    return response
                outs = [await run_in_threadpool(run_routed, routed, one, self.limits, self.serving.pattern,
                                                self.deadlines) for one in choices(req)]
                bodies = [routed_completion(out, req.model) for out in outs]
                payload, headers = merge_choices([b for b, _ in bodies]), bodies[0][1]
                background = release_after(outs[0])  # a sampled audit starts once the response is sent
                for out in outs:
                    self.routed_answered(routed, req, out)
            else:
                if req.stream:
                    response = await stream_plain(self, routed, req, *self.chunks)
                    streaming = True
                    return response
                payloads = [await run_in_threadpool(self.run_plain_call, routed, one, None) for one in choices(req)]
                payload, headers = merge_choices([p for p, _ in payloads]), payloads[0][1]
                for one in payloads:
                    self.plain_answered(req, one[0])
            self.done(200)
            return JSONResponse(text_payload(payload) if self.text else payload, headers=headers, background=background)
        except Exception as exc:  # noqa: BLE001 - every failure is answered in the OpenAI shape
            err = api_error(exc).with_traceback(None)  # no frame <-> traceback cycle keeps a request's data alive
            self.serving.sides.failed(exc)
            self.done(err.status)
            extra = {"retry-after": str(RETRY_AFTER_S)} if err.status == 503 else None
            return JSONResponse(err.body(), status_code=err.status, headers=extra)
        finally:
            if not streaming:
                self.done()

    @property
    def chunks(self) -> tuple:
        return (TextChunks,) if self.text else ()

    def delta_sent(self) -> None:
        """A streamed text delta went out: time to first token, then time between tokens (vllm:* histograms)."""
        now = time.perf_counter()
        last, self.last_delta = getattr(self, "last_delta", None), now
        if last is None:
            self.metrics.vllm.first_token(self.model, now - self.t0)
        else:
            self.metrics.vllm.next_token(self.model, now - last)

    def run_plain_call(self, routed, req, streamer):
        """(body, headers) of one plain-model call (in a worker thread)."""
        return run_plain(routed, req, self.min_new_tokens, self.serving.pattern, self.deadlines, streamer)

    def plain_answered(self, req, payload) -> None:
        self.strategy = payload["routedvlm"]["trace"][0]["stage"]
        self.serving.sides.answered([req.model])
        self.metrics.answered(req.model, payload["routedvlm"]["trace"], payload["usage"], answered_by=req.model,
                              finish_reason=payload["choices"][0]["finish_reason"])

    def routed_answered(self, routed, req, out) -> None:
        self.strategy = out.strategy
        self.serving.sides.answered(out.models)
        self.metrics.answered(req.model, out.trace, out.usage, fallback=out.fallback, loaded=routed.router is not None,
                              answered_by=out.answer_model, finish_reason=out.finish_reason)

    async def parse(self, raw):
        """The validated request, parsed in a worker thread (at most PARSE_SLOTS at once); after a large body the
        freed heap goes back to the OS, whether it parsed or not. A small body without images is parsed here (the
        hand-off to a thread cost more than the parse: a fifth of serve's CPU time per plain request)."""
        from starlette.concurrency import run_in_threadpool

        if len(raw) <= INLINE_PARSE_BYTES and b"image" not in raw:  # a small text-only body: microseconds of JSON
            return parse_body(raw, self.limits, self.models, self.served, self.text)
        failed = None
        async with self.parsing:
            try:
                req = await run_in_threadpool(parse_body, raw, self.limits, self.models, self.served, self.text)
            except Exception as exc:  # noqa: BLE001 - raised again below, without the frames that hold the body
                failed = exc.with_traceback(None)
        if len(raw) >= TRIM_BYTES:
            del raw
            await run_in_threadpool(trim_heap)
        if failed is not None:
            raise failed
        return req

    def done(self, status: int | None = None) -> None:
        """End the request's time in flight and count it with `status` (None: not counted); only the first call counts."""
        if not self.open:
            return
        self.open = False
        self.metrics.in_flight.dec()
        if status is not None:
            seconds = time.perf_counter() - self.t0 if status == 200 else None
            self.metrics.request(self.route, self.model, self.strategy, status, seconds)
