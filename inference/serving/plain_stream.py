"""A plain model's streamed chat completion, token by token: the local generate call gets a streamer
(`streaming.plain_streamer`) that turns the token ids so far into the reasoning and the answer text with the same
functions that make the non-streamed reply (`split_reasoning` / `clean_answer`), and sends what grew as `reasoning`
/ `content` deltas, holding back what a later token could still change (a partial character or think tag). A side
whose call cannot stream (the vLLM engine side) sends its reply in one delta at the end; the deltas always
concatenate to the non-streamed reply.
"""
from __future__ import annotations

import asyncio
import contextvars

from ..sides.base import THINK_CLOSE, THINK_OPEN
from ..streaming import StreamCancelled, _stable
from .completions import Chunks, plain_completion, plain_model


class _Field:
    """The text of one delta field sent so far; `offer(text)` returns what is new (None once it was rewritten)."""

    def __init__(self):
        self.sent, self.diverged = "", False

    def offer(self, text: str) -> str:
        if self.diverged or not text.startswith(self.sent):
            self.diverged = True
            return ""
        new, self.sent = text[len(self.sent):], text
        return new


class PlainStreamer:
    """transformers' streamer protocol (`put` / `end`): the first `put` is the prompt, then one token per step."""

    def __init__(self, model, reasoning: bool, send, stop=()):
        self.model, self.reasoning, self.send, self.stop = model, reasoning, send, tuple(stop)
        self.ids, self.prompt_tokens, self.cancelled, self.pending = [], None, False, 0
        self.fields = {"reasoning": _Field(), "content": _Field()}
        marker = getattr(getattr(model, "prompts", None), "answer_marker", None)
        self.markers = [m for m in (THINK_OPEN, THINK_CLOSE, marker, *self.stop) if m]

    def texts(self, ids) -> dict:
        if self.reasoning is None:  # a raw continuation (/v1/completions): the text as decoded
            out = {"content": self.model.decode(ids)}
        elif not self.reasoning:
            out = {"content": self.model.clean_answer(ids)}
        else:
            _, reasoning, answer = self.model.split_reasoning(ids)
            out = {"reasoning": reasoning, "content": answer or ""}
        hits = [i for i in (out["content"].find(s) for s in self.stop) if i >= 0]
        if hits:
            out["content"] = out["content"][:min(hits)]
        return out

    def put(self, value) -> None:
        if self.cancelled:
            raise StreamCancelled("the client of this streamed request disconnected")
        if self.prompt_tokens is None:
            self.prompt_tokens = int(value.reshape(-1).shape[0])
            return
        self.feed([int(t) for t in value.reshape(-1).tolist()])

    def feed(self, new: list) -> None:
        """New output tokens: ids from a local generate call, token strings from an HTTP side's stream."""
        if self.cancelled:
            raise StreamCancelled("the client of this streamed request disconnected")
        self.ids.extend(new)
        self.emit({k: _stable(v, self.markers) for k, v in self.texts(self.ids).items()}, len(new))

    def emit(self, texts: dict, tokens: int) -> None:
        delta = {k: d for k, text in texts.items() if (d := self.fields[k].offer(text))}
        self.pending += tokens
        if delta:
            self.send(("delta", (delta, self.pending)))
            self.pending = 0

    def end(self) -> None:
        return None


def rest_of(streamer: PlainStreamer, payload: dict) -> dict:
    """What the streamed deltas still lack of the final reply (all of it when nothing streamed)."""
    msg = payload["choices"][0]["message"]
    delta = {}
    for key, text in (("reasoning", msg.get("reasoning")), ("content", msg.get("content"))):
        field = streamer.fields[key]
        if text and not field.diverged and text.startswith(field.sent):
            rest = text[len(field.sent):]
        elif text and field.diverged:
            rest = None  # rewritten by a later token: the client's text cannot be fixed by appending
        else:
            rest = text[len(field.sent):] if text else ""
        if rest:
            delta[key] = rest
    return delta


async def stream_plain(handler, routed, req, chunk_class=Chunks):
    """An SSE response for a plain model: deltas as the local call decodes, then the finish chunk (+ usage)."""
    from fastapi.responses import StreamingResponse

    loop, events = asyncio.get_running_loop(), asyncio.Queue()
    model, think = plain_model(routed, req)
    thinking_output = think and model.style != "never" and not req.continue_final_message
    if req.raw_prompt is not None:
        from ..routed import pipeline_sides

        model, thinking_output = pipeline_sides(routed.pipeline)[req.model], None
    stop = req.sampling.stop if req.sampling is not None else ()
    streamer = PlainStreamer(model, thinking_output, lambda ev: loop.call_soon_threadsafe(events.put_nowait, ev), stop)
    context = contextvars.copy_context()

    def run():
        try:
            out = context.run(handler.run_plain_call, routed, req, streamer)
            streamer.send(("done", out))
        except BaseException as exc:  # noqa: BLE001 - handed to the response body
            streamer.send(("error", exc))

    chunks = chunk_class(req.model, req.include_usage, req.continuous_usage)
    headers = {"x-routedvlm-models": req.model, "x-routedvlm-answer-model": req.model,
               "x-routedvlm-answer-decoded-before-route": "0", "cache-control": "no-cache"}
    loop.run_in_executor(None, run)
    first = await events.get()
    if first[0] == "error":
        raise first[1]
    return StreamingResponse(_body(handler, req, streamer, chunks, events, first), media_type="text/event-stream",
                             headers=headers)


async def _body(handler, req, streamer, chunks, events, first):
    from .bodies import api_error

    status, event = 499, first
    try:
        yield chunks.delta({"role": "assistant", "content": ""})
        while True:
            kind, value = event
            if kind == "delta":
                delta, tokens = value
                chunks.prompt_tokens = streamer.prompt_tokens or 0
                handler.delta_sent()
                yield chunks.delta(delta, tokens=tokens)
            elif kind == "done":
                payload, _ = value
                rest = rest_of(streamer, payload)
                if rest:
                    yield chunks.delta(rest)
                choice = payload["choices"][0]
                handler.plain_answered(req, payload)
                status = 200
                yield chunks.end(choice["finish_reason"], payload["usage"], payload["routedvlm"])
                return
            else:
                err = api_error(value)
                handler.serving.sides.failed(value)
                status = err.status
                yield Chunks.error(err)
                return
            event = await events.get()
    finally:
        streamer.cancelled = True
        handler.done(status)


__all__ = ["PlainStreamer", "plain_completion", "stream_plain"]
