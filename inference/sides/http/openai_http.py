"""A small HTTP client for OpenAI-compatible chat completions: timeouts, retries with backoff, clear errors.

Retries connection failures, timeouts, 408/409/429 and 5xx (exponential backoff with jitter, honouring
`Retry-After`), then raises `SideUnavailableError` (the server is down, not the request wrong); other 4xx fail at
once with `BackendError`. Every `BackendError` names the server, the request (what it was for
and its `x-request-id`) and the server's own error message.
"""
from __future__ import annotations

import logging
import random
import time
import uuid

from routedvlm.errors import BackendError, ConfigError, SideUnavailableError

logger = logging.getLogger(__name__)
RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}


class ChatClient:
    """POST /chat/completions to `base_url` (e.g. 'http://127.0.0.1:8000/v1'); thread-safe (one httpx.Client)."""

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout: float = 60.0, max_retries: int = 2,
                 backoff_s: float = 0.5):
        import httpx

        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"The `base_url` parameter must be an http(s) URL such as 'http://127.0.0.1:8000/v1'. "
                              f"Got {base_url!r} instead.")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ConfigError(f"The `max_retries` parameter must be an integer >= 0. Got {max_retries!r} instead.")
        if not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ConfigError(f"The `timeout` parameter must be a positive number of seconds. Got {timeout!r} instead.")
        self.base_url, self.max_retries, self.backoff_s = base_url.rstrip("/"), max_retries, backoff_s
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(timeout=timeout, headers=headers)

    def create(self, body: dict, *, what: str = "chat completion", headers: dict | None = None,
               path: str = "/chat/completions") -> dict:
        """The JSON response of one chat completion (`headers`: more request headers; `path`: another POST route, e.g.
        "/completions"); raises BackendError after the retries are spent."""
        def read(resp, rid: str, attempt: int) -> dict:
            try:
                resp.read()
                return resp.json()
            except ValueError:
                raise self._error(what, rid, "the response is not JSON", attempt) from None

        return self._send(body, what, headers, read, path=path)

    def stream(self, body: dict, on_tokens, *, what: str = "chat completion", headers: dict | None = None) -> dict:
        """One chat completion sent with `stream: true`: `on_tokens(token strings)` is called as each chunk arrives
        (sse.py), and the reply is returned in the shape `create` returns. A failure before the first token is retried
        like `create`; after it, the tokens already handed on cannot be taken back, so it raises at once."""
        from .sse import ReplyBuilder, events

        body = {**body, "stream": True, "stream_options": {"include_usage": True}}

        def read(resp, rid: str, attempt: int) -> dict:
            builder = ReplyBuilder()
            for chunk in events(resp.iter_lines()):
                if chunk.get("error"):
                    raise self._error(what, rid, f"error event in the stream: {_message(chunk['error'])}", attempt)
                tokens = builder.add(chunk)
                if tokens:
                    state["started"] = True
                    on_tokens(tokens)
            return builder.response()

        state = {"started": False}
        return self._send(body, what, headers, read, state=state)

    def _send(self, body: dict, what: str, headers, read, state: dict | None = None,
              path: str = "/chat/completions") -> dict:
        """POST /chat/completions with retries (module docstring); `read(resp, rid, attempt)` turns a 200 into the reply."""
        import httpx

        url, rid = f"{self.base_url}{path}", f"routedvlm-{uuid.uuid4().hex[:12]}"
        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            try:
                with self._http.stream("POST", url, json=body, headers={**(headers or {}), "x-request-id": rid}) as resp:
                    if resp.status_code == 200:
                        return read(resp, rid, attempt)
                    resp.read()
            except (httpx.TimeoutException, httpx.TransportError) as exc:
                if last or (state or {}).get("started"):
                    raise self._error(what, rid, f"{type(exc).__name__}: {exc}", attempt, SideUnavailableError) from None
                self._sleep(attempt, None, what, type(exc).__name__)
                continue
            if resp.status_code not in RETRY_STATUS or last:
                kind = SideUnavailableError if resp.status_code in RETRY_STATUS else BackendError
                raise self._error(what, rid, f"HTTP {resp.status_code}: {_server_message(resp)}", attempt, kind)
            self._sleep(attempt, resp.headers.get("retry-after"), what, f"HTTP {resp.status_code}")
        raise AssertionError("unreachable")

    def models(self) -> list:
        """`GET /models`: the served models' entries (`data`), or BackendError."""
        import httpx

        try:
            resp = self._http.get(f"{self.base_url}/models")
        except (httpx.TimeoutException, httpx.TransportError) as exc:
            raise self._error("models", "-", f"{type(exc).__name__}: {exc}", 0) from None
        if resp.status_code != 200:
            raise self._error("models", "-", f"HTTP {resp.status_code}: {_server_message(resp)}", 0)
        return list((resp.json() or {}).get("data") or [])

    def _sleep(self, attempt: int, retry_after, what: str, why: str) -> None:
        try:
            delay = float(retry_after) if retry_after is not None else self.backoff_s * 2**attempt
        except ValueError:
            delay = self.backoff_s * 2**attempt
        delay = min(delay, 30.0) * (1 + 0.1 * random.random())
        logger.warning("%s at %s failed (%s); retrying in %.2f s", what, self.base_url, why, delay)
        time.sleep(delay)

    def _error(self, what: str, rid: str, why: str, attempt: int, kind=BackendError) -> BackendError:
        return kind(
            f"The OpenAI-compatible server {self.base_url} failed the {what} request (x-request-id {rid}) after "
            f"{attempt + 1} attempt(s): {why}. Check that the server is running and serves this model."
        )

    def close(self) -> None:
        self._http.close()


def _message(err) -> str:
    return err.get("message", str(err)) if isinstance(err, dict) else str(err)


def _server_message(resp) -> str:
    try:
        err = resp.json().get("error")
        return err.get("message", str(err)) if isinstance(err, dict) else str(err or resp.text[:300])
    except (ValueError, AttributeError):
        return resp.text[:300]
