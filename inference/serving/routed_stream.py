"""A routed request's streamed chat completion (SSE): the route goes out in the headers once decided (with the request
id, and `x-routedvlm-answer-decoded-before-route: 1` when a cascade accepted an answer it decoded before deciding,
which then arrives as one delta), then the answer as it decodes."""
from __future__ import annotations

import asyncio

from .bodies import api_error
from .calls import stream_runner
from .completions import Chunks, route_headers, route_info
from .prompt_check import neutralise


async def stream_routed(handler, routed, req, chunk_class=Chunks):
    """The StreamingResponse of one routed request; `handler` (server.ChatHandler) counts it when it ends."""
    from fastapi.responses import StreamingResponse
    from starlette.concurrency import run_in_threadpool

    loop, events = asyncio.get_running_loop(), asyncio.Queue()
    neutralise(req.messages, handler.serving.pattern)
    stream = await run_in_threadpool(routed.stream, messages=req.messages, max_tokens=req.max_tokens,
                                     sampling=req.sampling)
    run = stream_runner(routed, stream, req, handler.limits, handler.serving.pattern, handler.deadlines)
    loop.run_in_executor(None, run, lambda ev: loop.call_soon_threadsafe(events.put_nowait, ev))
    kind, value = await events.get()
    if kind == "error":
        raise value
    handler.strategy = value["strategy"]
    chunks = chunk_class(req.model, req.include_usage, req.continuous_usage)

    async def body():
        status = 499  # the client went away before the end
        try:
            yield chunks.delta({"role": "assistant", "content": ""})
            while True:
                kind, out = await events.get()
                if kind == "delta":
                    handler.delta_sent()
                    yield chunks.delta({"content": out}, tokens=1)
                    continue
                if kind == "done":
                    handler.routed_answered(routed, req, out)
                    status = 200
                    yield chunks.end(out.finish_reason, out.usage, route_info(out))
                else:
                    err = api_error(out)
                    handler.serving.sides.failed(out)
                    status = err.status
                    yield Chunks.error(err)
                return
        finally:
            stream.cancel()
            handler.done(status)

    headers = {**route_headers(value["strategy"], value["keep_tokens"], value["models"], value.get("decoded", False)),
               "x-routedvlm-request-id": stream.request_id, "x-routedvlm-audited": "1" if stream.audit_draw else "0",
               "cache-control": "no-cache"}
    return StreamingResponse(body(), media_type="text/event-stream", headers=headers)
