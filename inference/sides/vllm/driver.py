"""One thread that owns a `vllm.LLM` and feeds it requests from any thread: the engine's own continuous batching.

`EngineDriver.submit(prompt, params, on_tokens=None)` queues one request and returns a Future of its `RequestOutput`;
`on_tokens(new token ids)` (a streamed answer, streaming.py) is called from the driver thread after every engine step
that produced tokens for it (vLLM's default `RequestOutputKind.CUMULATIVE` outputs: each step's output holds all the
ids so far), before the Future is resolved; if it raises (the client went away), the request is aborted in the engine
and the Future gets that exception. The driver
thread adds every queued request to the engine (`LLM.enqueue`, the path `LLM.generate` takes) and steps it
(`LLM.llm_engine.step`, what `LLM.generate`'s own loop does), so requests from many samples share the engine's
batches and new ones join between steps instead of waiting for a batch to drain. With one caller thread there is one
request in flight (a standalone latency); with many, the engine schedules them together. Nothing here is specific to
routedvlm's stages: `sides/vllm/side.py` builds the prompts and reads the outputs.
"""
from __future__ import annotations

import logging
import queue
import threading
from concurrent.futures import Future

from routedvlm.errors import BackendError

log = logging.getLogger(__name__)


class EngineDriver:
    """Owns `llm` (a built `vllm.LLM`) from one daemon thread; `submit` may be called from any thread."""

    def __init__(self, llm, name: str = "vllm"):
        self.llm, self.name = llm, name
        self._queue: queue.Queue = queue.Queue()
        self._pending: dict[str, Future] = {}
        self._closed = threading.Event()
        self.steps = 0  # engine steps taken (a benchmark reads it)
        self._thread = threading.Thread(target=self._loop, name=f"routedvlm-{name}", daemon=True)
        self._thread.start()

    def submit(self, prompt, params, on_tokens=None) -> Future:
        """Queue one request (a vLLM prompt dict and its SamplingParams); the Future holds its final RequestOutput.
        on_tokens: called with the new output token ids as they decode (module docstring)."""
        if self._closed.is_set():
            raise BackendError(f"The in-process vLLM engine {self.name!r} is closed; load the side again.")
        fut: Future = Future()
        fut.on_tokens, fut.seen = on_tokens, 0
        self._queue.put((prompt, params, fut))
        return fut

    def run(self, prompts, params) -> list:
        """Submit several requests at once and wait for all of them (outputs in the order given)."""
        futures = [self.submit(p, s) for p, s in zip(prompts, params)]
        return [f.result() for f in futures]

    def close(self) -> None:
        self._closed.set()
        self._queue.put(None)
        self._thread.join(timeout=30)

    # ----- the driver thread -------------------------------------------------------------------------------------
    def _take(self, block: bool) -> list:
        items = []
        try:
            item = self._queue.get(block=block)
            while True:
                if item is None:
                    return items + [None]
                items.append(item)
                item = self._queue.get_nowait()
        except queue.Empty:
            return items

    def _add(self, items) -> None:
        prompts, params, futures = [i[0] for i in items], [i[1] for i in items], [i[2] for i in items]
        try:
            ids = self.llm.enqueue(prompts, params, use_tqdm=False)
        except Exception as exc:  # noqa: BLE001 - a bad request fails its callers, the engine goes on
            if len(items) > 1:  # find the culprit: add them one by one
                for item in items:
                    self._add([item])
                return
            futures[0].set_exception(exc)
            return
        for rid, fut in zip(ids, futures):
            fut.engine_id = rid
            self._pending[_external(rid)] = fut

    def _loop(self) -> None:
        engine = self.llm.llm_engine
        while True:
            items = self._take(block=not self._pending)
            stop = bool(items) and items[-1] is None
            items = [i for i in items if i is not None]
            if items:
                self._add(items)
            if stop:
                self._fail_all(BackendError(f"The in-process vLLM engine {self.name!r} was closed."))
                return
            if not self._pending:
                continue
            try:
                outputs = engine.step()
                self.steps += 1
            except Exception as exc:  # noqa: BLE001 - a dead engine fails every waiting caller
                log.error("vLLM engine %s failed: %s: %s", self.name, type(exc).__name__, exc)
                self._fail_all(BackendError(f"The in-process vLLM engine {self.name!r} failed: "
                                            f"{type(exc).__name__}: {exc}"))
                self._closed.set()
                return
            for out in outputs:
                fut = self._pending.get(str(out.request_id))
                if fut is not None and fut.on_tokens is not None and not self._stream(fut, out):
                    continue
                if getattr(out, "finished", False):
                    fut = self._pending.pop(str(out.request_id), None)
                    if fut is not None:
                        fut.set_result(out)

    def _stream(self, fut: Future, out) -> bool:
        """Hand `out`'s new token ids to the request's `on_tokens`; False (request aborted, Future failed) if it raised."""
        ids = list(out.outputs[0].token_ids) if out.outputs else []
        if len(ids) <= fut.seen:
            return True
        new, fut.seen = ids[fut.seen:], len(ids)
        try:
            fut.on_tokens(new)
            return True
        except Exception as exc:  # noqa: BLE001 - the streamed client went away: stop decoding for it
            self._pending.pop(str(out.request_id), None)
            if not getattr(out, "finished", False):
                try:
                    self.llm.llm_engine.abort_request([fut.engine_id])
                except Exception as abort_exc:  # noqa: BLE001 - it then runs to its limit; nobody reads it
                    log.warning("vLLM engine %s could not abort a request: %s", self.name, abort_exc)
            fut.set_exception(exc)
            return False

    def _fail_all(self, exc) -> None:
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            fut.set_exception(exc)
        for item in self._take(block=False):
            if item is not None:
                item[2].set_exception(exc)


def _external(request_id: str) -> str:
    """The id a RequestOutput carries: vLLM adds '-<8 random characters>' to the id `enqueue` returns."""
    head, sep, tail = str(request_id).rpartition("-")
    return head if sep and len(tail) == 8 else str(request_id)
