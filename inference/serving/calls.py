"""The model calls of one chat request, as run in a worker thread: special-token text neutralised, the routed
prompt counted against its limits, and every local generate call inside the request's deadline (`deadlines`, a deadline.Deadlines).

`run_routed` / `run_plain` hold the RoutedVLM's lock (re-entrant) across the prompt check and the model calls,
so the count uses the tokenizer no other request is using, and a request that waited past its deadline for the
lock starts no model call.
"""
from __future__ import annotations

import contextvars
from dataclasses import replace

from .completions import plain_completion
from .prompt_check import check_routed_prompt, neutralise


def run_routed(routed, req, limits, pattern, deadlines):
    """RoutedOutput of a non-streamed routed request (its sampled audit deferred: server.release_after starts it)."""
    neutralise(req.messages, pattern)
    with deadlines.within(), routed.lock:
        check_routed_prompt(routed, req.messages, limits.max_prompt_tokens, req.model)
        return routed.generate(messages=req.messages, max_tokens=req.max_tokens, defer_audit=True, sampling=req.sampling)


def run_plain(routed, req, min_new_tokens, pattern, deadlines, streamer=None):
    """(body, headers) of a request to a plain model ("small" / "large"); its context is checked before generating.
    streamer: what the local generate call streams its tokens into (plain_stream.py)."""
    neutralise(req.messages, pattern)
    with deadlines.within():
        return plain_completion(routed, req, min_new_tokens, streamer)


def choices(req) -> list:
    """The request once per choice (`n`): choice i samples with seed `seed + i` when a seed is given, so the n
    answers differ and each is reproducible."""
    if req.n == 1:
        return [req]
    seed = req.sampling.seed if req.sampling is not None else None
    return [replace(req, n=1, sampling=req.sampling if seed is None else req.sampling.with_seed(seed + i))
            for i in range(req.n)]


def stream_runner(routed, stream, req, limits, pattern, deadlines):
    """A callable `run(put)` for an executor thread: the streamed request under its deadline and prompt check,
    a refused prompt reported as an ("error", APIError) event. It runs in a copy of the caller's context."""
    context = contextvars.copy_context()

    def run(put):
        def inner():
            with deadlines.within(), routed.lock:
                try:
                    check_routed_prompt(routed, req.messages, limits.max_prompt_tokens, req.model)
                except Exception as exc:  # noqa: BLE001 - answered as the stream's first event
                    put(("error", exc))
                    return
                stream.run(put)

        context.run(inner)

    return run
