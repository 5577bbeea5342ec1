"""Shadow audits: a uniformly random fraction of answered requests also runs the reference strategy R, off the
request path, so the `AuditMonitor` learns how often the routed answer and R's disagree.

`offer(req, out)` draws the request (probability `rate`) after its answer is known and puts it on a bounded queue
(a full queue skips the audit and counts it: the client is never delayed). One worker thread runs R under the
RoutedVLM's model lock (local models are stateful), compares the answers (`same_answer`), records the result in the
monitor and hands an audit record to the `sink` (an `AuditLog`, or any callable). With `defer=True` the worker
waits until `release()` of that audit is called (the server calls it once the response has been sent).
"""
from __future__ import annotations

import io
import json
import logging
import queue
import random
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from routedvlm.errors import InputError

from .monitor import MAX_REMEMBERED, AuditMonitor, FeedbackError

logger = logging.getLogger(__name__)
GATE_SECONDS = 60.0  # a deferred audit that is never released runs after this long anyway
_SPACE = re.compile(r"\s+")


def same_answer(a, b) -> bool:
    """Whether two answers say the same (case, spacing, a final period and number formatting ignored). Answers that
    differ only in ways a scorer would forgive count as different: that overstates disagreement, never regret."""
    x, y = (_SPACE.sub(" ", str(v or "")).strip().rstrip(".").strip().casefold() for v in (a, b))
    if x == y:
        return True
    try:
        return float(x) == float(y)
    except ValueError:
        return False


@dataclass
class _Item:
    request_id: str
    request: object
    output: object
    gate: threading.Event = field(default_factory=threading.Event)


class ShadowAuditor:
    """Audits of one RoutedVLM (see the module docstring). `sink(record)` receives every audit and feedback record."""

    def __init__(self, routed, rate: float, monitor: AuditMonitor, *, sink=None, store_inputs: bool = False,
                 queue_size: int = 64, seed: int | None = None):
        self.routed, self.rate, self.monitor, self.sink = routed, float(rate), monitor, sink
        self.store_inputs, self.reference = store_inputs, monitor.reference
        self._rng = random.Random(seed)
        self._queue: queue.Queue = queue.Queue(maxsize=queue_size)
        self._answers: OrderedDict[str, tuple] = OrderedDict()  # request id -> (routed answer, R's answer)
        self._pending: dict[str, dict | None] = {}  # queued audits -> gold that arrived before they finished
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._busy = 0
        self._thread = threading.Thread(target=self._work, daemon=True, name="routedvlm-audit")
        self._thread.start()

    # ----- request path ---------------------------------------------------------------------------------------
    def draw(self) -> bool:
        """Whether a request is drawn for an audit (a streamed request draws before its answer, for its headers)."""
        with self._lock:
            return self._rng.random() < self.rate

    def offer(self, request_id: str, req, out, *, defer: bool = False, drawn: bool | None = None) -> bool:
        """Draw this request (or take `drawn`, an earlier `draw()`); True when it was queued for an audit. Never
        blocks."""
        if not (self.draw() if drawn is None else drawn):
            return False
        item = _Item(request_id, req, out)
        if not defer:
            item.gate.set()
        with self._lock:
            try:
                self._queue.put_nowait(item)
            except queue.Full:
                self.monitor.count_skipped()
                return False
            self._pending[request_id] = None
            self._busy += 1
        out.release_audit = item.gate.set
        return True

    # ----- worker ---------------------------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                item.gate.wait(GATE_SECONDS)
                self._audit(item)
            except Exception as exc:  # noqa: BLE001 - an audit must never take the server down
                logger.warning("audit of request %s failed: %s: %s", item.request_id, type(exc).__name__, exc)
                self.monitor.count_failed(item.request_id)
                with self._lock:
                    self._pending.pop(item.request_id, None)
            finally:
                with self._lock:
                    self._busy -= 1
                    self._idle.notify_all()

    def _audit(self, item: _Item) -> None:
        out = item.output
        if out.strategy == self.reference:
            ref = out.text  # the routed strategy is R itself: nothing to run
        else:
            with self.routed.lock:
                ref = self.routed.pipeline.run_strategy(item.request, self.reference).answer
        agree = same_answer(out.text, ref)
        with self._lock:
            self._answers[item.request_id] = (out.text, ref)
            while len(self._answers) > MAX_REMEMBERED:
                self._answers.popitem(last=False)
        status = self.monitor.record(item.request_id, agree)
        self._emit(self._record(item, ref, agree, status))
        with self._lock:
            gold = self._pending.pop(item.request_id, None)
        if gold is not None:  # gold that arrived while the audit was queued; the audit itself counts either way
            try:
                self.feedback(item.request_id, **gold)
            except InputError as exc:
                logger.warning("gold feedback for request %s, sent while its audit was queued, was refused: %s",
                               item.request_id, exc)

    def _record(self, item: _Item, ref: str, agree: bool, status: str) -> dict:
        out, req = item.output, item.request
        decision = next((r for r in out.trace if r.get("stage") == "decision"), {})
        rec = {"kind": "audit", "request_id": item.request_id, "time": time.time(), "router": self.monitor.router,
               "router_type": decision.get("router_type"), "reference": self.reference, "alpha": self.monitor.alpha,
               "delta": self.monitor.delta, "window": self.monitor.window, "routed_strategy": out.strategy, "keep_tokens": out.keep_tokens, "routed_answer": out.text,
               "reference_answer": ref, "agree": bool(agree), "status": status,
               "features": json.dumps(decision.get("features", {}), sort_keys=True),
               "question": None, "image": None, "gold": None, "routed_correct": None, "reference_correct": None}
        if self.store_inputs:
            rec["question"] = getattr(req, "user_question", req.question)
            rec["image"] = _png(req.image)
        return rec

    def _emit(self, rec: dict) -> None:
        if self.sink is None:
            return
        try:
            self.sink(rec)
        except Exception as exc:  # noqa: BLE001 - a full disk must not stop serving; the monitor keeps counting
            logger.error("could not write the audit record of %s: %s", rec["request_id"], exc)

    # ----- gold feedback --------------------------------------------------------------------------------------
    def feedback(self, request_id: str, *, answer=None, routed_correct=None, reference_correct=None) -> str:
        """Gold for an audited request: the correct `answer` (compared like `same_answer`), or both correctness
        values. Returns the status. Gold for an audit still queued is kept until it finishes."""
        if answer is None and (routed_correct is None or reference_correct is None):
            raise InputError("Gold feedback needs the correct `answer`, or both `routed_correct` and "
                             "`reference_correct` (booleans).")
        with self._lock:
            if request_id in self._pending:
                if self._pending[request_id] is not None:
                    raise FeedbackError(f"Request {request_id!r} already has gold feedback; it is counted once.", 409)
                self._pending[request_id] = {"answer": answer, "routed_correct": routed_correct,
                                             "reference_correct": reference_correct}
                return self.monitor.status
            answers = self._answers.get(request_id)
        if answer is not None:
            if answers is None:
                raise FeedbackError(f"No audit is remembered for request id {request_id!r}: only audited requests "
                                    "(response header x-routedvlm-audited: 1) take gold feedback.")
            routed_correct, reference_correct = (same_answer(a, answer) for a in answers)
        status = self.monitor.feedback(request_id, regret=bool(reference_correct) and not bool(routed_correct))
        self._emit({"kind": "feedback", "request_id": request_id, "time": time.time(), "router": self.monitor.router,
                    "gold": None if answer is None else str(answer), "routed_correct": bool(routed_correct),
                    "reference_correct": bool(reference_correct), "status": status})
        return status

    # ----- lifecycle ------------------------------------------------------------------------------------------
    def wait(self, timeout: float | None = None) -> bool:
        """Block until every queued audit is done (tests, benchmarks, shutdown); False on timeout."""
        with self._lock:
            return self._idle.wait_for(lambda: self._busy == 0, timeout)

    def close(self, timeout: float | None = 10.0) -> None:
        """Stop the worker after the audits already queued (waiting at most `timeout` seconds)."""
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            logger.warning("audit queue still full after %s s; the worker stops with the process", timeout)
            return
        self._thread.join(timeout)


def _png(image) -> bytes | None:
    if image is None:
        return None
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()
