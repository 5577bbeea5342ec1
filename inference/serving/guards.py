"""Server-wide guards of `routedvlm serve` (the connection limits are in connections.py).

`overloaded_response`: the raw 503 a refused connection gets. `OncePerInterval`: a loop
exception handler that logs each kind of loop failure (e.g. `accept()` out of file descriptors) at most once per
interval, with the count of the ones it held back, instead of one traceback per attempt. `graceful_server`: a
uvicorn server that, once shutdown starts, gives running requests `seconds`, then stops their model calls (each
answers 503 `shutting_down` at its next token) and cancels what is left `STOP_GRACE_S` later. `worker_threads`: enough
worker threads for every admitted request's blocking call, so the server never runs fewer calls at once than it admits.
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


def worker_threads(loop, requests: int) -> int:
    """Give the running loop's default executor (`run_in_executor(None, ...)`: the streamed calls) and anyio's thread
    limiter (`run_in_threadpool`: the other calls, parsing) `requests` + 8 threads each; returns that number. Their
    defaults (cpu count + 4 and 40) would hold calls that HTTP backends could run concurrently in a queue here."""
    from concurrent.futures import ThreadPoolExecutor

    import anyio.to_thread

    workers = int(requests) + 8
    loop.set_default_executor(ThreadPoolExecutor(max_workers=workers, thread_name_prefix="routedvlm-serve"))
    anyio.to_thread.current_default_thread_limiter().total_tokens = workers
    return workers


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
