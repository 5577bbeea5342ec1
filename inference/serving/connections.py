"""Connection-level limits of `routedvlm serve`, on top of uvicorn's h11 protocol (uvicorn has no body-read
timeout, no per-client limit and no reserved probe slots; its `limit_concurrency` counts every connection alike).

`ConnectionLimits`: what a connection may hold and for how long.
- request head: a connection that has not sent a complete request head within `header_timeout` seconds is closed
  (a new one, or a kept-alive one between requests; uvicorn's `timeout_keep_alive` only starts after a response);
- request body (mod_reqtimeout's `body=T-MAX,MinRate=R`): once its head is in, a body gets `header_timeout`
  seconds plus one second per `min_body_rate` bytes it has sent, never more than `body_timeout` seconds in all;
  a body still incomplete then is answered 408 `request_timeout` and the connection closed, so a client sending a
  byte every few seconds holds a slot for seconds, not for as long as it likes;
- connections: beyond `max_connections` open connections, or beyond `max_connections_per_client` from one client
  address, a connection may still take one of `probe_slots` reserved slots (at most half of them per client
  address) that answer only GET /health, /live, /ready and /metrics (503 for anything else) and must send their
  head within `PROBE_HEAD_TIMEOUT_S`; beyond those it is answered 503 + `Retry-After` and closed before anything
  is read. A load balancer or probe that shares its address with the clients shares their per-client quota.
"""
from __future__ import annotations

from dataclasses import dataclass

from .guards import RateLimitedLog, overloaded_response

PROBES = frozenset({"/health", "/live", "/ready", "/metrics"})
PROBE_HEAD_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class ConnectionLimits:
    """The limits of one server's connections (see the module docstring). 0 for `max_connections_per_client`,
    `body_timeout` or `min_body_rate` turns that limit off."""

    header_timeout: float = 10.0
    max_connections: int = 512
    max_connections_per_client: int = 0
    probe_slots: int = 0
    body_timeout: float = 0.0
    min_body_rate: int = 0

    def body_deadline(self, received: int) -> float:
        """Seconds after its head by which a body must be complete, given `received` bytes of it so far."""
        allowed = self.header_timeout + (received / self.min_body_rate if self.min_body_rate else float("inf"))
        if self.body_timeout:
            allowed = min(allowed, self.body_timeout)
        return allowed

    @property
    def times_bodies(self) -> bool:
        return bool(self.body_timeout or self.min_body_rate)


def request_timeout_response(seconds: float) -> bytes:
    """A complete HTTP/1.1 408 response (OpenAI error shape) that closes the connection."""
    import json

    body = json.dumps({"error": {"message": f"The request body did not arrive in time (after {seconds:.3g} s; "
                                            "routedvlm serve --body-timeout / --min-body-rate).",
                                 "type": "invalid_request_error", "param": None, "code": "request_timeout"}}).encode()
    head = (f"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n")
    return head.encode() + body


def probe_only(app):
    """An ASGI app answering the probe routes with `app` and anything else 503 (a reserved probe slot)."""

    async def guarded(scope, receive, send):
        if scope["type"] != "http" or (scope["path"] in PROBES and scope["method"] in ("GET", "HEAD")):
            await app(scope, receive, send)
            return
        from starlette.responses import Response

        body = overloaded_response("This connection took a slot reserved for /health, /live, /ready and /metrics; "
                                   "retry later.").partition(b"\r\n\r\n")[2]
        await Response(body, status_code=503, media_type="application/json",
                       headers={"retry-after": "1", "connection": "close"})(scope, receive, send)

    return guarded


class _Counts:
    """Open connections per client address and the reserved probe slots in use (shared by a server's protocols)."""

    def __init__(self):
        self.per_client: dict = {}
        self.probe_per_client: dict = {}
        self.probes = 0


def guarded_protocol(header_timeout: float, max_connections: int, limits: ConnectionLimits | None = None):
    """uvicorn's H11Protocol under `limits` (default: only the head timeout and the connection limit)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    limits = limits or ConnectionLimits(header_timeout, max_connections)
    refusals, timeouts, counts = RateLimitedLog(60.0), RateLimitedLog(60.0), _Counts()

    class GuardedH11Protocol(H11Protocol):
        _head_timer = _body_timer = None
        _client_key = _probe_key = None
        _counted = False
        _body_start = 0.0
        _body_bytes = 0
        _body_cycle = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._client_key = self.client[0] if self.client else None
            mine = counts.per_client[self._client_key] = counts.per_client.get(self._client_key, 0) + 1
            self._counted = True
            per_client = limits.max_connections_per_client
            if len(self.connections) > limits.max_connections or (per_client and mine > per_client):
                if not self._take_probe_slot():
                    why = (f"--max-connections {limits.max_connections}" if len(self.connections) > limits.max_connections
                           else f"--max-connections-per-client {per_client}")
                    refusals.log(why, f"refusing connections beyond {why} (503)")
                    transport.write(overloaded_response(f"This server holds its limit of connections ({why}); "
                                                        "retry later."))
                    transport.close()
                    return
            self._start_head_timer()

        def _take_probe_slot(self) -> bool:
            share = max(1, limits.probe_slots // 2)
            key = self._client_key
            if counts.probes >= limits.probe_slots or counts.probe_per_client.get(key, 0) >= share:
                return False
            counts.probes += 1
            counts.probe_per_client[key] = counts.probe_per_client.get(key, 0) + 1
            self._probe_key = (key,)
            self.app = probe_only(self.app)
            return True

        def data_received(self, data: bytes) -> None:
            if self._head_timer is None and self._between_requests():
                self._start_head_timer()
            super().data_received(data)
            if self._head_timer is not None and not self._between_requests():
                self._head_timer.cancel()
                self._head_timer = None
            self._time_body(len(data))

        def connection_lost(self, exc) -> None:
            for timer in (self._head_timer, self._body_timer):
                if timer is not None:
                    timer.cancel()
            self._head_timer = self._body_timer = None
            if self._counted:
                self._counted = False
                left = counts.per_client.get(self._client_key, 1) - 1
                if left > 0:
                    counts.per_client[self._client_key] = left
                else:
                    counts.per_client.pop(self._client_key, None)
            if self._probe_key is not None:
                counts.probes -= 1
                key = self._probe_key[0]
                counts.probe_per_client[key] -= 1
                if not counts.probe_per_client[key]:
                    del counts.probe_per_client[key]
                self._probe_key = None
            super().connection_lost(exc)

        def _between_requests(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def _start_head_timer(self) -> None:
            seconds = min(limits.header_timeout, PROBE_HEAD_TIMEOUT_S) if self._probe_key else limits.header_timeout
            self._head_timer = self.loop.call_later(seconds, self._head_timed_out)

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if self._between_requests() and not self.transport.is_closing():
                self.transport.close()

        # ---- the body deadline ----
        def _reading_body(self) -> bool:
            return self.cycle is not None and self.cycle.more_body and not self.cycle.disconnected

        def _time_body(self, n: int) -> None:
            if not limits.times_bodies:
                return
            if not self._reading_body():
                if self._body_timer is not None:
                    self._body_timer.cancel()
                    self._body_timer = None
                return
            if self._body_timer is None or self._body_cycle is not self.cycle:  # a head arrived: the body's clock starts
                if self._body_timer is not None:
                    self._body_timer.cancel()
                self._body_start, self._body_bytes, self._body_cycle = self.loop.time(), 0, self.cycle
                self._body_timer = self.loop.call_later(limits.body_deadline(0), self._body_check)
            else:
                self._body_bytes += n

        def _body_check(self) -> None:
            self._body_timer = None
            if not self._reading_body() or self.transport.is_closing():
                return
            elapsed = self.loop.time() - self._body_start
            allowed = limits.body_deadline(self._body_bytes)
            if elapsed < allowed:
                self._body_timer = self.loop.call_later(allowed - elapsed, self._body_check)
                return
            timeouts.log("body", f"closing connections whose request body is late (408; {self._body_bytes} bytes "
                                 f"in {elapsed:.3g} s; --body-timeout {limits.body_timeout:g}, --min-body-rate "
                                 f"{limits.min_body_rate})")
            if not self.cycle.response_started:
                self.transport.write(request_timeout_response(elapsed))
            self.transport.close()

    return GuardedH11Protocol
