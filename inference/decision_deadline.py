"""A deadline on a router's decision: a decision that overruns is abandoned, never waited for.

`DecisionDeadline(seconds).call(fn)` runs `fn` (the router's scoring, e.g. LightGBM's predict) in a daemon worker
thread and waits at most `seconds`: past it, `DecisionTimeout` is raised (the caller answers with the fallback) and
the router counts as stalled (`stalled()`) until that call returns, if ever; meanwhile every `call` raises
`DecisionTimeout` at once, so no request thread waits on a hung router and no further worker is spent on it.
A thread cannot be killed: a decision that never returns keeps one daemon thread (and a core) busy, which does not
block the process from exiting. Workers are reused; the context (request deadline) of the caller is kept.
"""
from __future__ import annotations

import contextvars
import queue
import threading

from routedvlm.errors import RoutedVLMError


class DecisionTimeout(RoutedVLMError, TimeoutError):
    """The router's decision ran past its deadline (or an earlier one still runs); the fallback decides."""


class _Job:
    def __init__(self, fn):
        self.fn, self.context, self.done = fn, contextvars.copy_context(), threading.Event()
        self.result = self.error = None

    def run(self) -> None:
        try:
            self.result = self.context.run(self.fn)
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            self.error = exc
        finally:
            self.done.set()


class DecisionDeadline:
    """Run decisions under `seconds` (None: in the caller's thread, no deadline)."""

    def __init__(self, seconds: float | None = 10.0):
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float))
                                    or not seconds > 0 or seconds == float("inf")):
            raise ValueError(f"The `decision_timeout` parameter must be a positive number of seconds or None. "
                             f"Got {seconds!r} instead.")
        self.seconds = seconds
        self._free: queue.SimpleQueue = queue.SimpleQueue()
        self._stalled: _Job | None = None

    def stalled(self) -> bool:
        """Whether a decision that overran its deadline is still running."""
        job = self._stalled
        return job is not None and not job.done.is_set()

    def call(self, fn):
        if self.seconds is None:
            return fn()
        if self.stalled():
            raise DecisionTimeout(f"an earlier decision of this router is still running past its deadline of "
                                  f"{self.seconds:g} s (RoutedVLM decision_timeout, serve --decision-timeout); the "
                                  "router is skipped until it returns")
        job = _Job(fn)
        self._worker().put(job)
        if not job.done.wait(self.seconds):
            self._stalled = job
            raise DecisionTimeout(f"the router's decision ran past its deadline of {self.seconds:g} s (RoutedVLM "
                                  "decision_timeout, serve --decision-timeout) and was abandoned")
        if job.error is not None:
            error, job.error = job.error, None
            raise error
        return job.result

    def _worker(self) -> queue.SimpleQueue:
        """The job queue of an idle worker thread (a new daemon thread when none is idle)."""
        try:
            return self._free.get_nowait()
        except queue.Empty:
            pass
        jobs: queue.SimpleQueue = queue.SimpleQueue()

        def loop():
            while True:
                job = jobs.get()
                job.run()
                del job
                self._free.put(jobs)

        threading.Thread(target=loop, daemon=True, name="routedvlm-decision").start()
        return jobs
