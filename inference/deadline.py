"""Per-request deadlines and a server-wide stop flag, checked by every local generate call.

`Deadlines(seconds).within()` sets a deadline for the model calls made in its context (a contextvar, so a
server's worker thread sees its own request's deadline); `Deadlines.stop()` asks every generate call under it
to stop (serve's shutdown). `timed_generate` calls `check()` before it starts and hands `criteria()` to `model.generate`, a
stopping criterion that raises at the next decoded token once the deadline passed or the stop flag is set. A
prefill already running is not interrupted (the server bounds prompt tokens instead); no thread is killed.
"""
from __future__ import annotations

import contextlib
import contextvars
import threading
import time

from routedvlm.errors import RoutedVLMError

_CURRENT: contextvars.ContextVar = contextvars.ContextVar("routedvlm_deadline", default=None)


class DeadlineExceeded(RoutedVLMError, TimeoutError):
    """A request's model calls ran past its deadline and were stopped."""


class ShuttingDown(RoutedVLMError, RuntimeError):
    """The server is shutting down; running model calls were stopped."""


class Deadlines:
    """A server's deadline policy: `within()` runs one request's model calls under `seconds` (None: no deadline)
    and this server's stop flag; `stop()` asks every such call, running or to come, to stop (ShuttingDown)."""

    def __init__(self, seconds: float | None = None):
        self.seconds, self.stopped = seconds, threading.Event()

    @contextlib.contextmanager
    def within(self):
        token = _CURRENT.set((time.monotonic(), self.seconds, self.stopped))
        try:
            yield
        finally:
            _CURRENT.reset(token)

    def stop(self) -> None:
        self.stopped.set()


def check() -> None:
    """Raise when the current request's server is stopping or its deadline passed (no-op outside `within`)."""
    value = _CURRENT.get()
    if value is None:
        return
    start, seconds, stopped = value
    if stopped.is_set():
        raise ShuttingDown("The server is shutting down; this request's model call was stopped.")
    if seconds is not None and time.monotonic() - start > seconds:
        raise DeadlineExceeded(f"The request ran past its deadline of {seconds:g} s (routedvlm serve "
                               "--request-timeout) and its model call was stopped.")


class _StopCriterion:
    """A transformers stopping criterion: raises (through `model.generate`) when `check()` does."""

    def __call__(self, input_ids, scores, **kwargs):
        import torch

        check()
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


def criteria() -> list:
    """Stopping criteria for a generate call made now: one that calls `check()` after every token."""
    return [] if _CURRENT.get() is None else [_StopCriterion()]
