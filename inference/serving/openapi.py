"""The OpenAPI 3.1 document of `routedvlm serve` (GET /openapi.json), written by hand: the chat handler parses its
body itself (protocol.py) so that every malformed request gets the OpenAI error shape, so FastAPI has no models to
derive a document from. It describes what the server accepts and answers; a schemathesis run checks it
(tests/inference/test_server_hostile.py)."""
from __future__ import annotations

ERROR = {"type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["message", "type", "param", "code"],
    "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                   "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}}}}
TEXT_PART = {"type": "object", "required": ["type", "text"],
             "properties": {"type": {"const": "text"}, "text": {"type": "string"}}}
IMAGE_PART = {"type": "object", "required": ["type", "image_url"], "properties": {
    "type": {"const": "image_url"},
    "image_url": {"type": "object", "required": ["url"], "properties": {"url": {"type": "string"}}}}}
MESSAGE = {"type": "object", "required": ["role", "content"], "properties": {
    "role": {"enum": ["system", "developer", "user", "assistant"]},
    "content": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"oneOf": [TEXT_PART, IMAGE_PART]}}]}}}
COMPLETION = {"type": "object", "required": ["id", "object", "created", "model", "choices", "usage"], "properties": {
    "id": {"type": "string"}, "object": {"const": "chat.completion"}, "created": {"type": "integer"},
    "model": {"type": "string"}, "usage": {"type": "object"},
    "choices": {"type": "array", "items": {"type": "object", "required": ["index", "message", "finish_reason"]}}}}
STATUSES = {"400": "invalid request", "401": "missing or wrong API key", "404": "unknown model",
            "413": "body too large", "499": "client disconnected", "503": "loading or overloaded (Retry-After)",
            "504": "the request's deadline passed"}


def _errors(codes) -> dict:
    return {c: {"description": STATUSES[c], "content": {"application/json": {"schema": ERROR}}} for c in codes}


def _probe(description: str, codes=("200",)) -> dict:
    return {"get": {"summary": description, "security": [],
                    "responses": {c: {"description": description, "content": {"application/json": {"schema": {
                        "type": "object"}}}} for c in codes}}}


def openapi_document(models, secured: bool) -> dict:
    """The document for a server answering model ids `models` (its /v1 routes need a Bearer key when `secured`)."""
    request = {"type": "object", "required": ["model", "messages"], "properties": {
        "model": {"enum": list(models)}, "messages": {"type": "array", "minItems": 1, "items": MESSAGE},
        "max_tokens": {"type": ["integer", "null"], "minimum": 1}, "stream": {"type": "boolean"},
        "temperature": {"type": ["number", "null"]}}}
    chat = {"post": {"summary": "Chat completion (OpenAI shape)", "requestBody": {"required": True, "content": {
        "application/json": {"schema": request}}}, "responses": {
        "200": {"description": "the answer (text/event-stream when `stream` is true)", "content": {
            "application/json": {"schema": COMPLETION}, "text/event-stream": {"schema": {"type": "string"}}}},
        **_errors(("400", "401", "404", "413", "499", "503", "504"))}}}
    model_list = {"get": {"summary": "Served model ids", "responses": {"200": {"description": "model list", "content": {
        "application/json": {"schema": {"type": "object", "required": ["object", "data"]}}}}, **_errors(("401", "503"))}}}
    text_request = {"type": "object", "required": ["model", "prompt"], "properties": {
        "model": {"enum": list(models)}, "prompt": {"type": "string", "minLength": 1},
        "max_tokens": {"type": ["integer", "null"], "minimum": 1}, "stream": {"type": "boolean"}}}
    text = {"post": {"summary": "Text completion (OpenAI / vLLM shape)", "requestBody": {"required": True, "content": {
        "application/json": {"schema": text_request}}}, "responses": {
        "200": {"description": "the completion (text/event-stream when `stream` is true)", "content": {
            "application/json": {"schema": {"type": "object", "required": ["id", "object", "choices", "usage"]}},
            "text/event-stream": {"schema": {"type": "string"}}}},
        **_errors(("400", "401", "404", "413", "499", "503", "504"))}}}
    doc = {"openapi": "3.1.0", "info": {"title": "routedvlm serve", "version": "1"},
           "paths": {"/v1/chat/completions": chat, "/v1/completions": text, "/v1/models": model_list,
                     "/version": _probe("the server's version"),
                     "/health": _probe("200 when the server can answer, else 503", ("200", "503")),
                     "/live": _probe("200 while the process runs"),
                     "/ready": _probe("200 once the models are loaded", ("200", "503"))}}
    if secured:
        doc["components"] = {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}}
        doc["security"] = [{"bearer": []}]
    return doc
