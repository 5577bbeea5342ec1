"""The routes vLLM's OpenAI server has beside chat, as `routedvlm serve` answers them: GET /v1/models (entries with
`root` and `max_model_len`; 503 `model_not_ready` while loading, as every /v1 route), GET /v1/models/{id},
GET /version, GET|POST /ping, and POST /tokenize / /detokenize for a model whose tokenizer is in this process (a
plain model on a local or engine side; the routed model and HTTP sides have none to offer: a 400 says so)."""
# no `from __future__ import annotations`: FastAPI reads the handlers' annotations at runtime

import json
import time

from .protocol import APIError


def version() -> str:
    from .completions import routedvlm_version

    return routedvlm_version()


def model_entries(routed, served_model: str, models) -> list:
    """The /v1/models entries: the routed model (root: the router it runs; max_model_len: the smallest context of its
    models) and each plain model (root: its checkpoint or server; max_model_len: its context, None when unknown)."""
    from ..routed import pipeline_sides

    sides, now = pipeline_sides(routed.pipeline), int(time.time())
    lengths = {alias: side.context_length() for alias, side in sides.items()}
    known = [n for n in lengths.values() if n]
    out = []
    for m in models:
        routed_model = m == served_model
        root = routed.router_source if routed_model else str(sides[m].name)
        length = (min(known) if known else None) if routed_model else lengths.get(m)
        out.append({"id": m, "object": "model", "created": now, "owned_by": "routedvlm", "root": root, "parent": None,
                    "max_model_len": length, "permission": []})
    return out


def _tokenizing_side(routed, served_model, model):
    from ..routed import pipeline_sides

    sides = pipeline_sides(routed.pipeline)
    if model == served_model:
        raise APIError(400, f"The routed model {served_model!r} runs several tokenizers; tokenize with a plain model "
                            f"({', '.join(sides)}).", param="model", code="unsupported_model")
    side = sides.get(model)
    if side is None:
        raise APIError(404, f"The model {model!r} does not exist on this server; use one of {sorted(sides)}.",
                       param="model", code="model_not_found")
    if getattr(side, "tokenizer", None) is None or not hasattr(side, "text_ids"):
        raise APIError(400, f"The model {model!r} is served by another server; ask that server to tokenize.",
                       param="model", code="model_is_remote")
    return side


def tokenize(routed, served_model: str, body: dict) -> dict:
    """vLLM's /tokenize: `prompt` (text) or `messages` (text-only chat, rendered with the model's template)."""
    side = _tokenizing_side(routed, served_model, body.get("model"))
    if isinstance(body.get("prompt"), str):
        ids = side.text_ids(body["prompt"])
    elif isinstance(body.get("messages"), list):
        try:
            text = side.tokenizer.apply_chat_template(body["messages"], tokenize=False,
                                                      add_generation_prompt=body.get("add_generation_prompt", True))
        except Exception as exc:  # noqa: BLE001 - a malformed chat is the client's
            raise APIError(400, f"The chat template cannot render these messages: {exc}", param="messages",
                           code="invalid_content") from None
        ids = side.text_ids(text)
    else:
        raise APIError(400, "`prompt` (a string) or `messages` is required.", param="prompt", code="invalid_value")
    return {"count": len(ids), "max_model_len": side.context_length(), "tokens": [int(t) for t in ids],
            "token_strs": None}


def detokenize(routed, served_model: str, body: dict) -> dict:
    side = _tokenizing_side(routed, served_model, body.get("model"))
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in tokens):
        raise APIError(400, "`tokens` must be a list of token ids.", param="tokens", code="invalid_value")
    return {"prompt": side.tokenizer.decode(tokens)}


def add_routes(app, serving, served_model: str, models, max_body_bytes: int) -> None:
    """Register the routes on `app` (create_app)."""
    from fastapi import Request
    from fastapi.responses import JSONResponse, Response

    from .bodies import read_body

    def answer(fn):
        try:
            return JSONResponse(fn())
        except APIError as exc:
            return JSONResponse(exc.body(), status_code=exc.status)

    @app.get("/v1/models")
    async def list_models():
        return answer(lambda: {"object": "list", "data": model_entries(serving.require(), served_model, models)})

    @app.get("/v1/models/{model_id:path}")
    async def one_model(model_id: str):
        def find():
            entries = {e["id"]: e for e in model_entries(serving.require(), served_model, models)}
            if model_id not in entries:
                raise APIError(404, f"The model {model_id!r} does not exist on this server; use one of "
                                    f"{sorted(entries)}.", param="model", code="model_not_found")
            return entries[model_id]
        return answer(find)

    @app.get("/version")
    async def get_version():
        return {"version": version()}

    @app.api_route("/ping", methods=["GET", "POST"])
    async def ping():
        return Response(status_code=200 if serving.routed is not None else 503)

    async def body_of(request) -> dict:
        raw = await read_body(request, max_body_bytes)
        try:
            body = json.loads(raw)
        except ValueError:
            raise APIError(400, "The request body is not valid JSON.", code="invalid_json") from None
        if not isinstance(body, dict):
            raise APIError(400, "The request body must be a JSON object.", code="invalid_json")
        return body

    @app.post("/tokenize")
    async def post_tokenize(request: Request):
        try:
            body = await body_of(request)
        except APIError as exc:
            return JSONResponse(exc.body(), status_code=exc.status)
        return answer(lambda: tokenize(serving.require(), served_model, body))

    @app.post("/detokenize")
    async def post_detokenize(request: Request):
        try:
            body = await body_of(request)
        except APIError as exc:
            return JSONResponse(exc.body(), status_code=exc.status)
        return answer(lambda: detokenize(serving.require(), served_model, body))
