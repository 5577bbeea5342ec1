"""Connection-level limits of `routedvlm serve`, on top of uvicorn's h11 protocol and asyncio loop.

`guarded_protocol(header_timeout, max_connections)`: an h11 protocol class that closes a connection which has
not sent a complete request head within `header_timeout` seconds (a new connection, or a kept-alive one between
requests; uvicorn's `timeout_keep_alive` only starts after a response), and answers a connection beyond
`max_connections` with 503 + `Retry-After` and closes it, before reading anything. `OncePerInterval`: a loop
exception handler that logs each kind of loop failure (e.g. `accept()` out of file descriptors) at most once per
interval, with the count of the ones it held back, instead of one traceback per attempt. `graceful_server`: a
uvicorn server that, once shutdown starts, gives running requests `seconds`, then stops their model calls (each
answers 503 `shutting_down` at its next token) and cancels what is left `STOP_GRACE_S` later.
"""
from __future__ import annotations

import json
import logging
import time

logger = logging.getLogger(__name__)
RETRY_AFTER_S = 1
STOP_GRACE_S = 5  # after the model calls are stopped, how long their 503 answers get before uvicorn cancels


def overloaded_response(message: str, retry_after: int = RETRY_AFTER_S) -> bytes:
    """A complete HTTP/1.1 503 response (OpenAI error shape) that closes the connection."""
    body = json.dumps({"error": {"message": message, "type": "server_error", "param": None,
                                 "code": "server_overloaded"}}).encode()
    head = (f"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            f"retry-after: {retry_after}\r\nconnection: close\r\n\r\n")
    return head.encode() + body


class RateLimitedLog:
    """`log(key, message)` emits at most once per `interval` seconds per key, adding how many were held back."""

    def __init__(self, interval: float = 60.0, level: int = logging.WARNING):
        self.interval, self.level, self.last, self.held = interval, level, {}, {}

    def log(self, key: str, message: str) -> None:
        now = time.monotonic()
        if key in self.last and now - self.last[key] < self.interval:
            self.held[key] = self.held.get(key, 0) + 1
            return
        held, self.last[key] = self.held.pop(key, 0), now
        more = f" ({held} more like it in the last {self.interval:g} s were not logged)" if held else ""
        logger.log(self.level, "%s%s", message, more)


class OncePerInterval(RateLimitedLog):
    """An asyncio loop exception handler logging each (message, exception type) once per interval, no traceback."""

    def __init__(self, interval: float = 60.0):
        super().__init__(interval, logging.ERROR)

    def __call__(self, loop, context: dict) -> None:
        exc = context.get("exception")
        message = context.get("message", "event loop error")
        key = f"{message}|{type(exc).__name__}"
        self.log(key, f"{message}: {type(exc).__name__}: {exc}" if exc is not None else message)


def guarded_protocol(header_timeout: float, max_connections: int):
    """uvicorn's H11Protocol with a request-head timeout and a connection limit (see the module docstring)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    refusals = RateLimitedLog(60.0)

    class GuardedH11Protocol(H11Protocol):
        _head_timer = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                refusals.log("connections", f"refusing connections beyond --max-connections {max_connections} (503)")
                transport.write(overloaded_response(f"This server holds its limit of {max_connections} connections; "
                                                    "retry later."))
                transport.close()
                return
            self._start_head_timer()

        def data_received(self, data: bytes) -> None:
            if self._head_timer is None and self._between_requests():
                self._start_head_timer()
            super().data_received(data)
            if self._head_timer is not None and not self._between_requests():
                self._head_timer.cancel()
                self._head_timer = None

        def connection_lost(self, exc) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            super().connection_lost(exc)

        def _between_requests(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def _start_head_timer(self) -> None:
            self._head_timer = self.loop.call_later(header_timeout, self._head_timed_out)

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if self._between_requests() and not self.transport.is_closing():
                self.transport.close()

    return GuardedH11Protocol


def graceful_server(config, deadlines, seconds: float):
    """A uvicorn.Server for `config` (whose `timeout_graceful_shutdown` should be `seconds + STOP_GRACE_S`) that
    calls `deadlines.stop()` `seconds` after its shutdown starts."""
    import asyncio

    import uvicorn

    class GracefulServer(uvicorn.Server):
        async def shutdown(self, sockets=None):
            asyncio.get_running_loop().call_later(seconds, deadlines.stop)
            await super().shutdown(sockets)

    return GracefulServer(config)
