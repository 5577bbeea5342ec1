"""Whether a loaded router still decides: a router that raises on every decision marks itself unhealthy.

`RouterHealth` counts decision outcomes; after `threshold` consecutive failures the router is unhealthy (the
fallback policy answers every request meanwhile) until a decision succeeds. A router whose decision overran its
deadline and still runs (`stalled`) is unhealthy at once, until that decision returns. Each distinct cause is logged once,
with its traceback; every request's trace still records the error of its own decision.
"""
from __future__ import annotations

import logging
import threading

logger = logging.getLogger(__name__)


class RouterHealth:
    """Decision outcomes of one router (thread-safe). `load_error`: why the router did not load (then never healthy)."""

    stalled = staticmethod(lambda: False)  # set by the PolicyRunner: whether a decision overran and still runs

    def __init__(self, name: str, *, threshold: int = 3, load_error: str | None = None):
        self.name, self.threshold, self.load_error = name, threshold, load_error
        self.decisions = self.failures = self.consecutive = 0
        self.last_error: str | None = None
        self._causes: set[str] = set()
        self._lock = threading.Lock()

    @property
    def healthy(self) -> bool:
        return self.load_error is None and self.consecutive < self.threshold and not self.stalled()

    def success(self) -> None:
        with self._lock:
            recovered = not self.healthy and self.load_error is None
            self.decisions += 1
            self.consecutive = 0
        if recovered:
            logger.warning("router %s decides again after failing; marked healthy", self.name)

    def failure(self, exc: BaseException) -> str:
        """Record a failed decision; returns the error text for the trace."""
        error = f"{type(exc).__name__}: {exc}"
        with self._lock:
            self.decisions += 1
            self.failures += 1
            self.consecutive += 1
            self.last_error = error
            first = error not in self._causes
            self._causes.add(error)
            now_unhealthy = self.consecutive == self.threshold
        if first:
            logger.error("router %s failed at decision time (%s); the fallback policy answers. Logged once per cause; "
                         "each request's trace records it.", self.name, error, exc_info=exc)
        if now_unhealthy:
            logger.error("router %s marked unhealthy: its last %d decisions failed (%s); the fallback policy answers "
                         "every request until a decision succeeds", self.name, self.threshold, error)
        return error

    def snapshot(self) -> dict:
        """The router's state for /health and /metrics."""
        with self._lock:
            stalled = self.stalled()
            error = self.load_error or (self.last_error if self.consecutive or stalled else None)
            return {"router_loaded": self.load_error is None, "router_healthy": self.healthy, "router_error": error,
                    "router_stalled": stalled,
                    "router_decisions": self.decisions, "router_decision_failures": self.failures,
                    "router_consecutive_failures": self.consecutive}
