"""An OpenAI-compatible chat-completions server for RoutedVLM (FastAPI): /v1/chat/completions (streamed or not),
/v1/models, and /health, /ready and /metrics, which need no API key (vLLM protects only the /v1 routes).

Model ids: the routed model (default "routedvlm") answers under the router's policy; "small" and "large" answer
with that side alone (see completions.py). With `loader=` the models load in the background: the server
listens at once, /ready and the /v1 routes answer 503 until they are loaded. A body is read only up to
`limits.max_body_bytes` (then 413); JSON and image decoding and the model calls run in worker threads, so the
event loop keeps answering probes. One lock serialises the calls of local models (they share one device).
No `from __future__ import annotations` here: FastAPI reads the handlers' annotations at runtime.
"""
import asyncio
import hmac
import json
import logging
import threading
import time

from ..audit.metrics import register as register_audit_metrics
from .audit_routes import FEEDBACK, feedback, release_after
from .completions import Chunks, context_of, plain_completion, route_headers, route_info, routed_completion
from .metrics import ServerMetrics
from .protocol import APIError, Limits, check_context, parse_chat_request

logger = logging.getLogger(__name__)
SIDES = ("small", "large")
CHAT = "/v1/chat/completions"
PARSE_SLOTS = 2  # request bodies parsed (JSON + images) at the same time
TRIM_BYTES = 4 * 2**20  # after parsing a body this large, freed heap pages go back to the OS


class Serving:
    """What the app serves: a RoutedVLM, given or loaded in a background thread by `loader()`."""

    def __init__(self, routed=None, loader=None, on_error=None):
        self.routed, self.loader, self.on_error, self.error = routed, loader, on_error, None

    def start(self) -> None:
        if self.routed is None and self.loader is not None:
            threading.Thread(target=self._load, daemon=True, name="routedvlm-load").start()

    def _load(self) -> None:
        try:
            self.routed = self.loader()
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


class KeyCheck:
    """ASGI middleware: the /v1 routes need `Authorization: Bearer <key>`; the probes and /metrics do not."""

    def __init__(self, app, key: str):
        self.app, self.expected = app, f"Bearer {key}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith("/v1"):
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                from fastapi.responses import JSONResponse

                exc = APIError(401, "Missing or wrong API key: send 'Authorization: Bearer <key>'.", code="invalid_api_key")
                await JSONResponse(exc.body(), status_code=401)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_app(routed=None, *, loader=None, on_load_error=None, served_model: str = "routedvlm",
               api_key: str | None = None, limits: Limits | None = None, min_new_tokens: int = 0):
    """The FastAPI app serving a RoutedVLM (`routed`, or `loader()` run in the background at startup).
    `min_new_tokens` applies to plain-model answers (tiny random models)."""
    import contextlib

    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response
    from starlette.exceptions import HTTPException

    limits, serving = limits or Limits(), Serving(routed, loader, on_load_error)
    models = (served_model, *SIDES)
    metrics = ServerMetrics(lambda: serving.routed is not None, serving.router_healthy)
    register_audit_metrics(metrics.registry, lambda: serving.routed.audit_status() if serving.routed is not None else None)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        serving.start()
        yield

    app = FastAPI(title="routedvlm", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.serving, app.state.metrics = serving, metrics
    if api_key is not None:
        app.add_middleware(KeyCheck, key=api_key)

    def error(exc: APIError):
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(HTTPException)
    async def http_error(request, exc):
        return error(APIError(exc.status_code, str(exc.detail), code="not_found" if exc.status_code == 404 else None))

    @app.get("/health")
    async def health():
        if serving.routed is None:
            return JSONResponse({"status": "loading" if serving.error is None else "failed", "ready": False},
                                status_code=200 if serving.error is None else 503)
        state = serving.routed.health()
        return {"status": "ok" if state["router_healthy"] else "degraded", "ready": True, **state}

    @app.get("/ready")
    async def ready():
        return JSONResponse({"ready": serving.routed is not None}, status_code=200 if serving.routed is not None else 503)

    @app.get("/metrics")
    async def scrape():
        body, content_type = metrics.render()
        return Response(body, media_type=content_type)

    @app.get("/v1/models")
    async def list_models():
        now = int(time.time())
        return {"object": "list", "data": [{"id": m, "object": "model", "created": now, "owned_by": "routedvlm"}
                                           for m in models]}

    @app.post(FEEDBACK)
    async def audit_feedback(request: Request):
        return await feedback(serving.require(), await read_body(request, limits.max_body_bytes))

    parsing = asyncio.Semaphore(PARSE_SLOTS)

    @app.post(CHAT)
    async def chat(request: Request):
        handler = ChatHandler(serving.require, metrics, limits, models, served_model, min_new_tokens, parsing)
        return await handler(request)

    return app


class ChatHandler:
    """One POST /v1/chat/completions: read, parse, answer (streamed or not), and count it in the metrics."""

    def __init__(self, require, metrics, limits, models, served_model, min_new_tokens, parsing):
        self.require, self.metrics, self.limits, self.models, self.parsing = require, metrics, limits, models, parsing
        self.served, self.min_new_tokens = served_model, min_new_tokens
        self.t0, self.model, self.strategy, self.open = time.perf_counter(), "", "", True

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
                _check_routed_context(routed, req)
                if req.stream:
                    response = await self.stream_routed(routed, req)
                    streaming = True
                    return response
                out = await run_in_threadpool(routed.generate, messages=req.messages, max_tokens=req.max_tokens,
                                              defer_audit=True)
                payload, headers = routed_completion(out, req.model)
                background = release_after(out)  # a sampled audit starts once the response is sent
                self.strategy = out.strategy
                self.metrics.answered(req.model, out.trace, out.usage, fallback=out.fallback, loaded=routed.router is not None)
            else:
                payload, headers = await run_in_threadpool(plain_completion, routed, req, self.min_new_tokens)
                self.strategy = payload["routedvlm"]["trace"][0]["stage"]
                self.metrics.answered(req.model, payload["routedvlm"]["trace"], payload["usage"])
            self.done(200)
            if req.stream and req.model != self.served:
                return _one_delta_stream(payload, req.include_usage)
            return JSONResponse(payload, headers=headers, background=background)
        except Exception as exc:  # noqa: BLE001 - every failure is answered in the OpenAI shape
            err = api_error(exc).with_traceback(None)  # no frame <-> traceback cycle keeps a request's data alive
            self.done(err.status)
            return JSONResponse(err.body(), status_code=err.status)
        finally:
            if not streaming:
                self.done()

    async def parse(self, raw):
        """The validated request, parsed in a worker thread (at most PARSE_SLOTS at once); after a large body the
        freed heap goes back to the OS, whether it parsed or not."""
        from starlette.concurrency import run_in_threadpool

        failed = None
        async with self.parsing:
            try:
                req = await run_in_threadpool(parse_body, raw, self.limits, self.models, self.served)
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
            self.metrics.request(CHAT, self.model, self.strategy, status, seconds)

    async def stream_routed(self, routed, req):
        """An SSE response: the route goes out in the headers once decided, then the answer as it decodes."""
        from fastapi.responses import StreamingResponse
        from starlette.concurrency import run_in_threadpool

        loop, events = asyncio.get_running_loop(), asyncio.Queue()
        stream = await run_in_threadpool(routed.stream, messages=req.messages, max_tokens=req.max_tokens)
        loop.run_in_executor(None, stream.run, lambda ev: loop.call_soon_threadsafe(events.put_nowait, ev))
        kind, value = await events.get()
        if kind == "error":
            raise value
        self.strategy = value["strategy"]
        chunks = Chunks(req.model, req.include_usage)

        async def body():
            status = 499  # the client went away before the end
            try:
                yield chunks.delta({"role": "assistant", "content": ""})
                while True:
                    kind, value = await events.get()
                    if kind == "delta":
                        yield chunks.delta({"content": value})
                        continue
                    if kind == "done":
                        self.metrics.answered(req.model, value.trace, value.usage, fallback=value.fallback,
                                              loaded=routed.router is not None)
                        status = 200
                        yield chunks.end(value.finish_reason, value.usage, route_info(value))
                    else:
                        err = api_error(value)
                        status = err.status
                        yield Chunks.error(err)
                    return
            finally:
                stream.cancel()
                self.done(status)

        headers = {**route_headers(value["strategy"], value["keep_tokens"]), "cache-control": "no-cache"}
        return StreamingResponse(body(), media_type="text/event-stream", headers=headers)


async def read_body(request, limit: int) -> bytearray:
    """The request body, refused (413) as soon as it is known to pass `limit` bytes: before reading, from its
    Content-Length, or while reading a body without one."""
    too_large = APIError(413, f"The request body is larger than this server's limit of {limit} bytes "
                              "(routedvlm serve --max-body-bytes).", code="request_too_large")
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise too_large
    body = bytearray()  # one growing buffer: no list of chunks plus a joined copy
    async for chunk in request.stream():
        if len(body) + len(chunk) > limit:
            raise too_large
        body += chunk
    return body


def parse_body(raw, limits: Limits, models, served_model: str):
    """JSON + request validation + image decoding (run in a worker thread)."""
    try:
        body = json.loads(raw)
    except ValueError:
        raise APIError(400, "The request body is not valid JSON.", code="invalid_json") from None
    return parse_chat_request(body, limits, models, routed_model=served_model)


def trim_heap() -> None:
    """Return freed heap memory to the OS (glibc keeps the pages of large freed buffers otherwise)."""
    import ctypes
    import ctypes.util

    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def api_error(exc: BaseException) -> APIError:
    """The OpenAI-shaped error for a failure: 4xx for bad input, 500 (logged) for anything else."""
    from routedvlm.errors import InputError

    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, InputError):
        return APIError(400, str(exc), param="messages", code=getattr(exc, "code", "invalid_input"))
    logger.error("request failed: %s: %s", type(exc).__name__, exc, exc_info=exc)
    return APIError(500, f"The model failed on this request ({type(exc).__name__}: {exc}).", type="server_error",
                    code="model_error")


def _check_routed_context(routed, req) -> None:
    if req.max_tokens is not None:
        contexts = [c for c in (context_of(routed.pipeline.small), context_of(routed.pipeline.large)) if c]
        check_context(req.model, min(contexts) if contexts else None, 0, req.max_tokens)


def _one_delta_stream(payload: dict, include_usage: bool):
    """A plain model's answer as an SSE stream of one delta (the plain models do not stream token by token)."""
    from fastapi.responses import StreamingResponse

    chunks, choice = Chunks(payload["model"], include_usage), payload["choices"][0]
    message = choice["message"]
    delta = {"role": "assistant", "content": message["content"]}
    if message.get("reasoning_content") is not None:
        delta["reasoning_content"] = message["reasoning_content"]
    data = chunks.delta(delta) + chunks.end(choice["finish_reason"], payload["usage"], payload["routedvlm"])
    return StreamingResponse(iter([data]), media_type="text/event-stream")
