"""API-key check of `routedvlm serve` (ASGI middleware): the /v1 routes need `Authorization: Bearer <key>`."""
import hmac

from .protocol import APIError


class KeyCheck:
    """ASGI middleware: the /v1 routes need `Authorization: Bearer <key>` (the scheme in any case, RFC 9110), sent
    once; the probes, /metrics and /openapi.json do not."""

    def __init__(self, app, key: str):
        self.app, self.expected = app, key.encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith("/v1"):
            given = [v for k, v in scope.get("headers") or [] if k == b"authorization"]
            scheme, _, token = (given[0] if given else b"").strip().partition(b" ")
            exc = None
            if len(given) > 1:
                exc = APIError(400, "The request has more than one Authorization header; send exactly one.",
                               code="duplicate_authorization")
            elif scheme.lower() != b"bearer" or not hmac.compare_digest(token.strip(), self.expected):
                exc = APIError(401, "Missing or wrong API key: send 'Authorization: Bearer <key>'.", code="invalid_api_key")
            if exc is not None:
                from fastapi.responses import JSONResponse

                await JSONResponse(exc.body(), status_code=exc.status)(scope, receive, send)
                return
        await self.app(scope, receive, send)
