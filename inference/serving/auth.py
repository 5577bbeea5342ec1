"""API-key checks of `routedvlm serve` (ASGI middleware): the /v1 routes need `Authorization: Bearer <key>`; gold
feedback (POST /v1/audit/feedback) needs its own key, which the chat key does not replace (gold moves the audit's
statement, so it is a separate role: whoever may chat may not vouch for the answers)."""
import hmac

from .protocol import APIError

FEEDBACK_PATH = "/v1/audit/feedback"


def _bearer(scope):
    """(the one Bearer token sent or None, an APIError for a request with more than one Authorization header)."""
    given = [v for k, v in scope.get("headers") or [] if k == b"authorization"]
    if len(given) > 1:
        return None, APIError(400, "The request has more than one Authorization header; send exactly one.",
                              code="duplicate_authorization")
    scheme, _, token = (given[0] if given else b"").strip().partition(b" ")
    return (token.strip() if scheme.lower() == b"bearer" else None), None


class KeyCheck:
    """ASGI middleware: the /v1 routes need `Authorization: Bearer <key>` (the scheme in any case, RFC 9110), sent
    once; the probes, /metrics and /openapi.json do not. POST /v1/audit/feedback needs `feedback_key` instead
    (403 when the server has none: gold feedback is off)."""

    def __init__(self, app, key: str | None = None, feedback_key: str | None = None):
        self.app = app
        self.expected = None if key is None else key.encode()
        self.feedback = None if feedback_key is None else feedback_key.encode()

    def _refusal(self, scope):
        path = scope["path"]
        feedback = path.rstrip("/") == FEEDBACK_PATH
        if not path.startswith("/v1") or (self.expected is None and not feedback):
            return None
        token, exc = _bearer(scope)
        if exc is not None:
            return exc
        if feedback:
            if self.feedback is None:
                return APIError(403, "Gold feedback is off on this server: it needs its own key (routedvlm serve "
                                     "--feedback-key or $ROUTEDVLM_FEEDBACK_KEY); the chat API key does not authorise "
                                     "it.", type="permission_error", code="feedback_disabled")
            if token is None or not hmac.compare_digest(token, self.feedback):
                return APIError(401, "Missing or wrong feedback key: send 'Authorization: Bearer <feedback key>' "
                                     "(the chat API key does not authorise gold feedback).", code="invalid_api_key")
            return None
        if token is None or not hmac.compare_digest(token, self.expected):
            return APIError(401, "Missing or wrong API key: send 'Authorization: Bearer <key>'.", code="invalid_api_key")
        return None

    async def __call__(self, scope, receive, send):
        exc = self._refusal(scope) if scope["type"] == "http" else None
        if exc is not None:
            from fastapi.responses import JSONResponse

            await JSONResponse(exc.body(), status_code=exc.status)(scope, receive, send)
            return
        await self.app(scope, receive, send)
