"""Which model sides of the served ladder are failing: a side whose server (or engine) stopped answering makes its
requests 503 + Retry-After with a one-line log (bodies.api_error), and /health reports it as degraded until a request
that runs it is answered again."""
from __future__ import annotations

import threading
import time


def unavailable(exc: BaseException) -> bool:
    """Whether `exc` is a side's outage (an HTTP side past its retries, a dead vLLM engine), not a bad request."""
    from routedvlm.errors import SideUnavailableError

    return isinstance(exc, SideUnavailableError) or type(exc).__name__ in ("EngineDeadError", "EngineGenerateError")


class SideHealth:
    """The failing sides: alias -> {"error", "since"} (`routed()`: the RoutedVLM whose sides are named)."""

    def __init__(self, routed):
        self.routed, self.failing, self._lock = routed, {}, threading.Lock()

    def failed(self, exc: BaseException) -> None:
        """Record a side outage (`exc`), on the side(s) its message names (every side when none is named)."""
        if not unavailable(exc):
            return
        routed, message = self.routed(), str(exc)
        if routed is None:
            return
        from ..routed import pipeline_sides

        sides = pipeline_sides(routed.pipeline)
        named = [a for a, side in sides.items() if _names(message, side)] or list(sides)
        with self._lock:
            for alias in named:
                self.failing.setdefault(alias, {"error": message.splitlines()[0][:300], "since": time.time()})

    def answered(self, aliases) -> None:
        """A request that ran these sides was answered: they answer again."""
        with self._lock:
            for alias in aliases:
                self.failing.pop(alias, None)

    def snapshot(self) -> dict:
        with self._lock:
            return {alias: dict(state) for alias, state in self.failing.items()}


def _names(message: str, side) -> bool:
    url, _, model_id = str(getattr(side, "name", "")).partition("#")
    return bool(model_id) and url in message and f"({model_id})" in message
