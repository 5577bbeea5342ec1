"""An OpenAI-compatible chat-completions server for RoutedVLM (FastAPI): /v1/chat/completions, /v1/models, /health.

Model ids: the routed model (default "routedvlm") answers under the router's policy (its token limits are
the pipeline's; `max_tokens` and `logprobs` of the request are not applied to it); "small" and "large"
answer with that side alone (honouring `chat_template_kwargs.enable_thinking`, `max_tokens`, `logprobs`,
`top_logprobs`, `min_tokens` and vLLM's `continue_final_message`; decoding is always greedy), so the
server doubles as a stand-in vLLM-like server for testing the OpenAI backend.
Requests run in a thread pool; one lock serialises the model calls (both models share one device).
The route is returned in headers `x-routedvlm-strategy` / `x-routedvlm-keep-tokens` and in the field `routedvlm`.
No `from __future__ import annotations` here: FastAPI reads the handlers' annotations at runtime.
"""
import hmac
import logging
import time
import uuid

from .openai_protocol import APIError, ChatRequest, Limits, parse_chat_request
from .vlm import THINK_OPEN

logger = logging.getLogger(__name__)
SIDES = ("small", "large")


def create_app(routed, *, served_model: str = "routedvlm", api_key: str | None = None, limits: Limits | None = None,
               min_new_tokens: int = 0):
    """The FastAPI app serving a RoutedVLM. `min_new_tokens` applies to plain-model answers (tiny random models)."""
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException

    limits = limits or Limits()
    models = (served_model, *SIDES)
    app = FastAPI(title="routedvlm", docs_url=None, redoc_url=None, openapi_url=None)

    def error(exc: APIError):
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.middleware("http")
    async def check_key(request: Request, call_next):
        if api_key is not None:
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {api_key}".encode()):
                return error(APIError(401, "Missing or wrong API key: send 'Authorization: Bearer <key>'.",
                                      code="invalid_api_key"))
        return await call_next(request)

    @app.exception_handler(HTTPException)
    async def http_error(request, exc):
        return error(APIError(exc.status_code, str(exc.detail), code="not_found" if exc.status_code == 404 else None))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request, exc):
        return error(APIError(400, f"Invalid request: {exc.errors()}"))

    @app.get("/health")
    def health():
        router = routed.active_router
        return {"status": "ok", "router_type": router.policy.router_type, "mode": router.policy.mode,
                "router_fallback": routed.router is None, "router_error": routed.router_error}

    @app.get("/v1/models")
    def list_models():
        now = int(time.time())
        return {"object": "list", "data": [{"id": m, "object": "model", "created": now, "owned_by": "routedvlm"}
                                           for m in models]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        try:
            body = await request.json()
        except ValueError:
            return error(APIError(400, "The request body is not valid JSON.", code="invalid_json"))
        try:
            req = parse_chat_request(body, limits, models)
            if req.model == served_model:
                payload, headers = await run_in_threadpool(_routed_completion, routed, req)
            else:
                payload, headers = await run_in_threadpool(_plain_completion, routed, req, min_new_tokens)
        except APIError as exc:
            return error(exc)
        except Exception as exc:  # noqa: BLE001 - answer every failure in the OpenAI shape
            from routedvlm.router.errors import InputError

            if isinstance(exc, InputError):
                return error(APIError(400, str(exc), param="messages", code="invalid_input"))
            logger.exception("request failed")
            return error(APIError(500, f"The model failed on this request ({type(exc).__name__}: {exc}).",
                                  type="server_error", code="model_error"))
        return JSONResponse(payload, headers=headers)

    return app


def _completion(model: str, content, reasoning=None, *, finish="stop", logprobs=None, usage=None, extra=None) -> dict:
    message = {"role": "assistant", "content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    out = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
           "model": model, "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": logprobs}],
           "usage": usage or {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}
    return out | (extra or {})


def _usage(prompt: int, completion: int, cached: int = 0) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}


def _routed_completion(routed, req: ChatRequest):
    out = routed.generate(messages=req.messages)
    models = [r for r in out.trace if r.get("model")]
    usage = _usage(sum(r["prefill_tokens"] + r["cached_tokens"] for r in models),
                   sum(r["decode_tokens"] for r in models), sum(r["cached_tokens"] for r in models))
    info = {"strategy": out.strategy, "keep_tokens": out.keep_tokens, "p_correct": out.p_correct,
            "fallback": out.fallback, "trace": out.trace}
    headers = {"x-routedvlm-strategy": out.strategy,
               "x-routedvlm-keep-tokens": "" if out.keep_tokens is None else str(out.keep_tokens)}
    return _completion(req.model, out.text, usage=usage, extra={"routedvlm": info}), headers


def _plain_completion(routed, req: ChatRequest, min_new_tokens: int):
    from .generation import timed_generate
    from .inputs import from_messages
    from .stages import record

    vlm = getattr(routed.pipeline, req.model)
    if getattr(vlm, "remote", False):
        raise APIError(400, f"The {req.model!r} model of this server is itself served by {vlm.client.base_url}; "
                            "query that server directly.", param="model", code="model_is_remote")
    messages, partial = req.messages, None
    if req.continue_final_message:
        last = messages[-1]
        if last["role"] != "assistant" or any(p["type"] != "text" for p in last["content"]):
            raise APIError(400, "continue_final_message needs a final assistant message with text only.",
                           param="messages", code="invalid_content")
        messages, partial = messages[:-1], "".join(p["text"] for p in last["content"])
    request = from_messages(messages)
    think = req.enable_thinking is not False  # like a hybrid template, thinking is on unless switched off
    side = (vlm.reasoner or vlm) if think else vlm
    mode = "reason" if think and side.style != "never" else "direct"
    text = side.render(request.messages(), mode)
    if partial is not None:
        if partial.startswith(THINK_OPEN):
            stripped = text.rstrip()
            text = stripped[: -len(THINK_OPEN)] if stripped.endswith(THINK_OPEN) else text
        text += partial
    cfg = routed.pipeline.config
    max_tokens = req.max_tokens or (cfg.max_reason_tokens if mode == "reason" and partial is None else cfg.max_direct_tokens)
    with routed.lock:
        gen = timed_generate(side.model, side.encode(request.image, text), max_new_tokens=max_tokens,
                             min_new_tokens=min(min_new_tokens if req.min_tokens is None else req.min_tokens, max_tokens))
    content, reasoning = _split(side, gen.token_ids, mode == "reason" and partial is None)
    eos = set(side._eos_ids())
    finish = "stop" if gen.token_ids and gen.token_ids[-1] in eos else "length"
    logprobs = _logprobs(side, gen, req.top_logprobs) if req.logprobs else None
    rec = record(f"{req.model}_{mode}", req.model, side, side.mode_name(mode), gen)
    usage = _usage(gen.prefill_tokens + gen.cached_tokens, gen.output_tokens, gen.cached_tokens)
    return _completion(req.model, content, reasoning, finish=finish, logprobs=logprobs, usage=usage,
                       extra={"routedvlm": {"trace": [rec]}}), {}


def _split(side, ids, reasoning_mode: bool):
    """(content, reasoning_content): like vLLM's reasoning parser, content is None while still reasoning."""
    if not reasoning_mode:
        return side.clean_answer(ids), None
    _, reasoning, answer = side.split_reasoning(ids)
    return answer, reasoning


def _token(side, tid) -> dict:
    text = side.tokenizer.decode([int(tid)])
    return {"token": text, "bytes": list(text.encode("utf-8"))}


def _logprobs(side, gen, top: int) -> dict:
    """OpenAI `logprobs.content` for every generated token. `top_logprobs` holds the top alternatives for the
    FIRST token only (from its full logits); later tokens list just the chosen token."""
    import torch

    content = []
    for i, (tid, lp) in enumerate(zip(gen.token_ids, gen.token_logprobs)):
        entry = {**_token(side, tid), "logprob": float(lp), "top_logprobs": []}
        if top:
            if i == 0 and gen.first_logits is not None:
                logp = torch.log_softmax(gen.first_logits[0].float(), dim=-1)
                vals, idx = logp.topk(min(top, logp.shape[-1]))
                entry["top_logprobs"] = [{**_token(side, j), "logprob": float(v)} for v, j in zip(vals.tolist(), idx.tolist())]
            else:
                entry["top_logprobs"] = [{**_token(side, tid), "logprob": float(lp)}]
        content.append(entry)
    return {"content": content}
