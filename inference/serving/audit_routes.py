"""The audit's part of `routedvlm serve`: POST /v1/audit/feedback (gold for an audited request) and the background
task that lets a sampled audit start once the response has been sent.

Feedback body: {"request_id": "<x-routedvlm-request-id of the response>", "answer": "<the correct answer>"} or
{"request_id": ..., "routed_correct": bool, "reference_correct": bool}. It needs the server's feedback key
(auth.py), not the chat key. Answers 200 with the audit's state, 404 for a request that was not audited (or no
longer remembered), 409 when it already has gold (each request's gold counts once), 400 for a bad body (also one
nested too deeply to parse), 413 beyond `MAX_FEEDBACK_BYTES`, 503 while the models load.
Behind several replicas the audit is kept by the replica that answered: feedback for a request id that names another
replica (`req-<replica>-…`) answers 404 `other_replica` naming it (docs/deploy.md).
"""
from __future__ import annotations

import json

from .auth import FEEDBACK_PATH
from .protocol import APIError

FEEDBACK = FEEDBACK_PATH
_FIELDS = ("answer", "routed_correct", "reference_correct")
MAX_FEEDBACK_BYTES = 64 * 1024  # a request id and an answer
MAX_ID_CHARS, MAX_ANSWER_CHARS = 200, 10_000
_OBJECT = {"type": "object", "required": ["request_id"], "additionalProperties": False, "properties": {
    "request_id": {"type": "string", "maxLength": MAX_ID_CHARS},
    "answer": {"type": ["string", "number"], "maxLength": MAX_ANSWER_CHARS},
    "routed_correct": {"type": "boolean"}, "reference_correct": {"type": "boolean"}}}
ERRORS = {"400": "invalid feedback", "401": "missing or wrong feedback key", "403": "gold feedback is off",
          "404": "not audited or not remembered", "409": "already has gold", "413": "body too large",
          "503": "loading"}


def openapi_path(error_schema: dict) -> dict:
    """The OpenAPI entry of the feedback route (server.py adds it to /openapi.json)."""
    errors = {c: {"description": d, "content": {"application/json": {"schema": error_schema}}} for c, d in ERRORS.items()}
    return {"post": {"summary": "Gold feedback for an audited request (needs the feedback key)",
                     "security": [{"feedback": []}],
                     "requestBody": {"required": True, "content": {"application/json": {"schema": _OBJECT}}},
                     "responses": {"200": {"description": "the audit's state", "content": {"application/json": {
                         "schema": {"type": "object", "required": ["status", "audit"]}}}}, **errors}}}


def release_after(out):
    """A Starlette BackgroundTask that releases `out`'s deferred audit (None when it has none)."""
    release = getattr(out, "release_audit", None)
    if release is None:
        return None
    from starlette.background import BackgroundTask

    return BackgroundTask(release)


def parse_feedback(raw) -> dict:
    try:
        body = json.loads(raw)
    except ValueError:
        raise APIError(400, "The request body is not valid JSON.", code="invalid_json") from None
    except RecursionError:
        raise APIError(400, "The request body nests JSON too deeply to parse; send one flat JSON object.",
                       code="invalid_json") from None
    if not isinstance(body, dict) or not isinstance(body.get("request_id"), str):
        raise APIError(400, "Feedback needs a JSON object with `request_id` (the x-routedvlm-request-id header of "
                            "the response) and `answer`, or `routed_correct` and `reference_correct`.",
                       param="request_id", code="invalid_feedback")
    extra = sorted(set(body) - {"request_id", *_FIELDS})
    bools = [k for k in ("routed_correct", "reference_correct") if k in body and not isinstance(body[k], bool)]
    if extra or bools or ("answer" in body and not isinstance(body["answer"], (str, int, float))):
        raise APIError(400, f"Feedback fields: request_id (string), answer (string), routed_correct and "
                            f"reference_correct (booleans). Got unknown {extra} / non-boolean {bools}.",
                       code="invalid_feedback")
    answer = body.get("answer")
    if len(body["request_id"]) > MAX_ID_CHARS or (isinstance(answer, str) and len(answer) > MAX_ANSWER_CHARS) \
            or isinstance(answer, bool) or (isinstance(answer, float) and answer != answer):
        raise APIError(400, f"Feedback `request_id` must be at most {MAX_ID_CHARS} characters and `answer` a string "
                            f"of at most {MAX_ANSWER_CHARS} characters or a number.", code="invalid_feedback")
    return body


def check_replica(routed, request_id: str) -> None:
    """APIError 404 when `request_id` was answered (and its audit is kept) by another replica than this one."""
    from ..request_ids import replica_of

    mine, theirs = routed.replica_id, replica_of(request_id)
    if mine is not None and theirs is not None and theirs != mine:
        raise APIError(404, f"Request {request_id!r} was answered by replica {theirs!r}, which keeps its audit; this "
                            f"is replica {mine!r}. Send the feedback to {theirs!r} (its pod address), not through the "
                            "load balancer.", param="request_id", code="other_replica")


async def feedback(routed, raw):
    """Apply one gold feedback to `routed`'s audit (in a worker thread: it may write the audit log)."""
    from fastapi.responses import JSONResponse
    from starlette.concurrency import run_in_threadpool

    from routedvlm.errors import InputError

    from ..audit.monitor import FeedbackError

    try:
        body = parse_feedback(raw)
        check_replica(routed, body["request_id"])
        if routed.auditor is None:
            raise APIError(404, "This server does not audit (start it with --audit-rate).", code="audit_off")
        rid = body.pop("request_id")
        status = await run_in_threadpool(lambda: routed.audit_feedback(rid, **body))
    except APIError as exc:
        return JSONResponse(exc.body(), status_code=exc.status)
    except FeedbackError as exc:
        err = APIError(exc.status, str(exc), param="request_id", code="not_audited" if exc.status == 404 else "duplicate")
        return JSONResponse(err.body(), status_code=err.status)
    except InputError as exc:
        err = APIError(400, str(exc), code="invalid_feedback")
        return JSONResponse(err.body(), status_code=400)
    return {"status": status, "audit": routed.audit_status()}
