"""Streaming the final answer as it decodes: a per-request `AnswerSink` fed by the local generation loop.

The pipeline marks the calls that produce a strategy's final answer (`answer_segment`); while a sink is active
in the current context (`active(sink)`, set by RoutedVLM after the route is decided), `timed_generate` hands
those calls a transformers streamer (an HTTP side feeds it the upstream server's streamed token strings instead,
`sides/http/sse.py`). The sink turns token ids into text deltas with the same function that
makes the final answer (`ModelSide.answer_text`), holding back what a later token could still change (a partial UTF-8
character, a partial `<think>` tag), so the deltas concatenate to the non-streamed answer. The in-process vLLM engine side does not stream (docs/serve.md):
its answer arrives in one delta.
"""
from __future__ import annotations

import contextlib
import logging
from contextvars import ContextVar

from . import sampling
from .final_answer import capped_ids
from .sides.base import THINK_CLOSE, THINK_OPEN

logger = logging.getLogger(__name__)
_SINK: ContextVar = ContextVar("routedvlm_answer_sink", default=None)
_SEGMENT: ContextVar = ContextVar("routedvlm_answer_segment", default=None)
_PLAIN: ContextVar = ContextVar("routedvlm_plain_streamer", default=None)


class StreamCancelled(Exception):
    """Raised inside generation when the client of a streamed request went away."""


def _stable(text: str, markers) -> str:
    """`text` without a tail a later token could still change: a partial UTF-8 character or a marker's prefix."""
    text = text.rstrip("\ufffd")
    for marker in markers:
        for n in range(min(len(marker) - 1, len(text)), 0, -1):
            if text.endswith(marker[:n]):
                return text[:-n]
    return text


class AnswerSink:
    """Collects the text of the final answer call(s) of one request and calls `emit(delta)` as it grows.

    max_tokens: only the first N tokens of the answer call count (the request's `max_tokens`)."""

    def __init__(self, emit, *, max_tokens: int | None = None, stop=()):
        self.emit, self.max_tokens, self.stop = emit, max_tokens, tuple(stop)
        self.sent, self.cancelled, self.diverged = "", False, False

    def begin(self, vlm, kind: str) -> "_Segment":
        return _Segment(self, vlm, kind)

    def offer(self, text: str) -> None:
        """The answer so far is `text`: emit what is new."""
        if self.diverged:
            return
        hits = [i for i in (text.find(s) for s in self.stop) if i >= 0]
        text = text[:min(hits)] if hits else text  # a stop string ends the answer (not sent)
        if not text.startswith(self.sent):
            self.diverged = True  # a later token rewrote earlier text (e.g. a stray </think>); stop streaming
            logger.warning("a streamed answer was rewritten by a later token; the rest is not streamed")
            return
        if len(text) > len(self.sent):
            delta, self.sent = text[len(self.sent):], text
            self.emit(delta)


class _Segment:
    """One marked stretch of the pipeline; every generate call inside it is one call of the answer."""

    def __init__(self, sink: AnswerSink, vlm, kind: str):
        self.sink, self.vlm, self.kind, self.calls = sink, vlm, kind, 0
        marker = getattr(getattr(vlm, "prompts", None), "answer_marker", None)
        self.markers = [m for m in (THINK_OPEN, THINK_CLOSE, marker, *sink.stop) if m]

    def streamer(self) -> "_Streamer":
        kind = self.kind if self.calls == 0 else "direct"  # a reasoning run's follow-up call is a direct answer
        self.calls += 1
        return _Streamer(self, kind)


class _Streamer:
    """A transformers streamer (`put` / `end`): the first `put` is the prompt, then one token per step."""

    def __init__(self, segment: _Segment, kind: str):
        self.segment, self.kind, self.ids, self.prompt_seen = segment, kind, [], False

    def put(self, value) -> None:
        sink = self.segment.sink
        if sink.cancelled:
            raise StreamCancelled("the client of this streamed request disconnected")
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        self.feed([int(t) for t in value.reshape(-1).tolist()])

    def feed(self, tokens: list) -> None:
        """New output tokens: ids from a local generate call, token strings from an HTTP side's stream."""
        sink = self.segment.sink
        if sink.cancelled:
            raise StreamCancelled("the client of this streamed request disconnected")
        self.ids.extend(tokens)
        ids = capped_ids(self.segment.vlm, self.ids, self.kind, sink.max_tokens)  # reasoning does not eat max_tokens
        sink.offer(_stable(self.segment.vlm.answer_text(ids, self.kind), self.segment.markers))

    def end(self) -> None:
        return None


@contextlib.contextmanager
def active(sink: AnswerSink):
    """Stream the final-answer calls made in this context into `sink`."""
    token = _SINK.set(sink)
    try:
        yield sink
    finally:
        _SINK.reset(token)


@contextlib.contextmanager
def answer_segment(vlm, kind: str = "direct"):
    """Mark the pipeline calls that produce a final answer of `vlm`: they stream into the active sink (if any) and
    sample with the request's sampling parameters (if any, see sampling.py)."""
    sink = _SINK.get()
    with sampling.answer_call():
        if sink is None or _SEGMENT.get() is not None:
            yield
            return
        token = _SEGMENT.set(sink.begin(vlm, kind))
        try:
            yield
        finally:
            _SEGMENT.reset(token)


@contextlib.contextmanager
def plain_streamer(streamer):
    """Hand `streamer` (transformers' `put` / `end`) to the generate calls made in the block (a plain model's
    streamed completion, serving/plain_stream.py)."""
    token = _PLAIN.set(streamer)
    try:
        yield
    finally:
        _PLAIN.reset(token)


def current_streamer():
    """The streamer for a generate call made now (None outside a marked final-answer call or a plain stream)."""
    plain = _PLAIN.get()
    if plain is not None:
        return plain
    segment = _SEGMENT.get()
    return None if segment is None else segment.streamer()


class RoutedStream:
    """One streamed RoutedVLM request. Iterate it for the answer's text deltas (the request runs in a background
    thread); afterwards `route` holds the decision and `output` the RoutedOutput. `run(put)` instead runs it in
    the calling thread and hands every event to `put`: ("route", {strategy, keep_tokens, fallback, models, decoded}), ("delta",
    text) and finally ("done", RoutedOutput) or ("error", exception). `cancel()` stops it at the next token."""

    def __init__(self, routed, request, max_tokens: int | None = None, sampling=None):
        import uuid

        self.routed, self.request, self.max_tokens, self.sampling = routed, request, max_tokens, sampling
        self.route, self.output, self._sink = None, None, None
        # known before the answer (a streamed response's header): the request's session key when it has one
        self.request_id = request.__dict__.get("_session") or f"req-{uuid.uuid4().hex}"
        auditor, sampled = getattr(routed, "auditor", None), sampling is not None and not sampling.neutral
        self.audit_draw = False if auditor is None or sampled else auditor.draw()  # drawn now, for the headers

    def cancel(self) -> None:
        if self._sink is not None:
            self._sink.cancelled = True

    def run(self, put) -> None:
        stop = self.sampling.stop if self.sampling is not None else ()
        self._sink = AnswerSink(lambda delta: put(("delta", delta)), max_tokens=self.max_tokens, stop=stop)

        def decided(decision, fallback, models, decoded=False):
            self.route = {"strategy": decision.strategy, "keep_tokens": decision.keep_tokens, "fallback": fallback,
                          "models": list(models), "decoded": decoded}
            put(("route", dict(self.route)))

        try:
            self.output = self.routed.run_request(self.request, max_tokens=self.max_tokens, on_decision=decided,
                                                  sink=self._sink, sampling=self.sampling, request_id=self.request_id,
                                                  audit_draw=self.audit_draw)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            put(("error", exc))
            return
        self._sink.offer(self.output.text)  # what did not stream (an accepted cascade answer, HTTP models)
        put(("done", self.output))

    def __iter__(self):
        import queue
        import threading

        events: queue.Queue = queue.Queue()
        threading.Thread(target=self.run, args=(events.put,), daemon=True, name="routedvlm-stream").start()
        while True:
            kind, value = events.get()
            if kind == "delta":
                yield value
            elif kind == "error":
                raise value
            elif kind == "done":
                return
