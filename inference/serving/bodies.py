"""A chat request's body read within its limit, parsed off the event loop, and any failure turned into the OpenAI
error a client gets (4xx for its own mistakes, 499 for a client gone mid-body, 503/504 for a stopping server or a
passed deadline or a model side's outage, 500 logged for anything else)."""
import json
import logging

from .. import deadline
from .protocol import APIError, Limits, parse_chat_request

logger = logging.getLogger("routedvlm.inference.serving.server")


async def read_body(request, limit: int) -> bytearray:
    """The request body, refused (413) as soon as it is known to pass `limit` bytes: before reading, from its
    Content-Length, or while reading a body without one."""
    too_large = APIError(413, f"The request body is larger than this server's limit of {limit} bytes "
                              "(routedvlm serve --max-body-bytes).", code="request_too_large")
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise too_large
    body = bytearray()  # one growing buffer: no list of chunks plus a joined copy
    async for chunk in request.stream():
        if len(body) + len(chunk) > limit:
            raise too_large
        body += chunk
    return body


def parse_body(raw, limits: Limits, models, served_model: str, text: bool = False):
    """JSON + request validation + image decoding (run in a worker thread); `text`: a /v1/completions body."""
    try:
        body = json.loads(raw)
    except ValueError:
        raise APIError(400, "The request body is not valid JSON.", code="invalid_json") from None
    except RecursionError:
        raise APIError(400, "The request body nests JSON too deeply to parse; send a flat chat request.",
                       code="invalid_json") from None
    if text:
        from .text_completions import chat_body

        body = chat_body(body)
    return parse_chat_request(body, limits, models, routed_model=served_model)


def trim_heap() -> None:
    """Return freed heap memory to the OS (glibc keeps the pages of large freed buffers otherwise)."""
    import ctypes
    import ctypes.util

    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def api_error(exc: BaseException) -> APIError:
    """The OpenAI-shaped error for a failure: 4xx for bad input, 500 (logged) for anything else."""
    from starlette.requests import ClientDisconnect

    from routedvlm.errors import InputError

    from .side_health import unavailable

    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, ClientDisconnect):  # nobody reads the answer; counted as nginx's 499, not an error
        logger.info("a client disconnected before sending its whole request body")
        return APIError(499, "The client disconnected before sending the whole request.", code="client_closed_request")
    if isinstance(exc, deadline.DeadlineExceeded):
        logger.warning("%s", exc)
        return APIError(504, str(exc), type="server_error", code="request_timeout")
    if isinstance(exc, deadline.ShuttingDown):
        return APIError(503, str(exc), type="server_error", code="shutting_down")
    if unavailable(exc):  # a side's outage: retry later; one line, no traceback
        logger.warning("a model side is unavailable: %s", str(exc).splitlines()[0][:500])
        return APIError(503, f"A model of this server is unavailable; retry later ({str(exc).splitlines()[0][:300]}).",
                        type="server_error", code="side_unavailable")
    if isinstance(exc, InputError):
        return APIError(400, str(exc), param="messages", code=getattr(exc, "code", "invalid_input"))
    logger.error("request failed: %s: %s", type(exc).__name__, exc, exc_info=exc)
    return APIError(500, f"The model failed on this request ({type(exc).__name__}: {exc}).", type="server_error",
                    code="model_error")
