"""The server side of the OpenAI chat-completions shape: request validation with limits, OpenAI-shaped errors.

`parse_chat_request(body, limits, models)` turns a JSON body into a `ChatRequest` holding Hugging Face chat
messages (decoded PIL images) or raises `APIError` (status, message, type, param, code), which the server
renders as `{"error": {"message", "type", "param", "code"}}`. Images must be base64 `data:` URLs: the
server never fetches a URL or reads a local path named by a client.
"""
from __future__ import annotations

import base64
import binascii
import io
from dataclasses import dataclass, field

ROLES = ("assistant", "system", "user")
PART_TYPES = ("image_url", "text")


class APIError(Exception):
    """An error answered to the client in the OpenAI error shape."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 type: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.type = status, message, param, code, type

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


@dataclass(frozen=True)
class Limits:
    """Request limits of `routedvlm serve`."""

    max_images: int = field(default=1, metadata={"help": "max images per request (the pipeline answers about one image)"})
    max_image_pixels: int = field(default=4096 * 4096, metadata={"help": "max width*height of an image"})
    max_image_bytes: int = field(default=20 * 2**20, metadata={"help": "max decoded bytes of an image"})
    max_text_chars: int = field(default=20_000, metadata={"help": "max characters of text over all messages"})
    max_tokens: int = field(default=4096, metadata={"help": "max `max_tokens` a client may ask of a plain model"})


@dataclass
class ChatRequest:
    """A validated chat-completions request: `messages` are HF chat messages with PIL images."""

    model: str
    messages: list
    max_tokens: int | None = None
    enable_thinking: bool | None = None
    logprobs: bool = False
    top_logprobs: int = 0
    continue_final_message: bool = False
    min_tokens: int | None = None


def _bad(message, param=None, code=None, status=400):
    return APIError(status, message, param=param, code=code)


def decode_image(url, limits: Limits, param: str):
    """A PIL RGB image from a `data:image/...;base64,...` URL, within the pixel and byte limits."""
    from PIL import Image, UnidentifiedImageError

    if not isinstance(url, str) or not url.startswith("data:"):
        raise _bad("Images must be base64 data URLs ('data:image/png;base64,...'); this server fetches no URLs.",
                   param, "invalid_image_url")
    header, _, payload = url.partition(",")
    if ";base64" not in header or not payload:
        raise _bad("An image data URL must be base64-encoded: 'data:image/<type>;base64,<data>'.", param, "invalid_image_url")
    if len(payload) * 3 // 4 > limits.max_image_bytes:
        raise _bad(f"An image is larger than the server's limit of {limits.max_image_bytes} bytes.", param, "image_too_large")
    try:
        raw = base64.b64decode(payload, validate=True)
        img = Image.open(io.BytesIO(raw))
        w, h = img.size
    except (binascii.Error, ValueError, UnidentifiedImageError, OSError):
        raise _bad("An image data URL does not hold a readable image (PNG, JPEG, ...).", param, "invalid_image") from None
    if w * h > limits.max_image_pixels:
        raise _bad(f"An image has {w}x{h} = {w * h} pixels, over the server's limit of {limits.max_image_pixels}.",
                   param, "image_too_large")
    try:
        return img.convert("RGB")
    except OSError:
        raise _bad("An image data URL does not hold a readable image (PNG, JPEG, ...).", param, "invalid_image") from None


def _content(content, limits: Limits, param: str, images: list) -> tuple[list, int]:
    """HF content parts of one message and its text length."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}], len(content)
    if not isinstance(content, list):
        raise _bad(f"`content` must be a string or a list of parts. Got {type(content).__name__}.", param, "invalid_content")
    parts, chars = [], 0
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        p = f"{param}[{j}]"
        if kind == "text" and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
            chars += len(part["text"])
        elif kind == "image_url":
            spec = part.get("image_url")
            url = spec.get("url") if isinstance(spec, dict) else spec
            images.append((p, url))
            parts.append({"type": "image", "image": url})
        else:
            raise _bad(f"A content part must be {{'type': 'text', 'text': str}} or {{'type': 'image_url', 'image_url': "
                       f"{{'url': 'data:...'}}}}. Got type {kind!r}.", p, "invalid_content")
    return parts, chars


def parse_messages(messages, limits: Limits) -> list:
    if not isinstance(messages, list) or not messages:
        raise _bad("`messages` is required: a non-empty list of {'role', 'content'} objects.", "messages", "missing_messages")
    out, images, chars = [], [], 0
    for i, msg in enumerate(messages):
        role = msg.get("role") if isinstance(msg, dict) else None
        if role not in ROLES:
            raise _bad(f"A message's `role` must be one of 'assistant', 'system' or 'user'. Got {role!r}.",
                       f"messages[{i}].role", "invalid_role")
        if "content" not in msg or msg["content"] is None:
            raise _bad("Every message needs `content`.", f"messages[{i}].content", "invalid_content")
        parts, n = _content(msg["content"], limits, f"messages[{i}].content", images)
        chars += n
        out.append({"role": role, "content": parts})
    if len(images) > limits.max_images:
        raise _bad(f"The request holds {len(images)} images; this server accepts at most {limits.max_images}.",
                   "messages", "too_many_images")
    if chars > limits.max_text_chars:
        raise _bad(f"The request holds {chars} characters of text; this server accepts at most {limits.max_text_chars}.",
                   "messages", "text_too_long")
    decoded = iter([decode_image(url, limits, p) for p, url in images])
    for msg in out:
        msg["content"] = [{"type": "image", "image": next(decoded)} if part["type"] == "image" else part
                          for part in msg["content"]]
    return out


def _int_field(body, name, low, high):
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
        raise _bad(f"`{name}` must be an integer in [{low}, {high}]. Got {v!r}.", name, "invalid_value")
    return v


def parse_chat_request(body, limits: Limits, models) -> ChatRequest:
    """Validate a chat-completions JSON body against `limits` and the served model ids."""
    if not isinstance(body, dict):
        raise _bad("The request body must be a JSON object.", None, "invalid_json")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("`model` is required: one of the ids listed by GET /v1/models.", "model", "missing_model")
    if model not in models:
        raise APIError(404, f"The model {model!r} does not exist on this server; use one of {sorted(models)}.",
                       param="model", code="model_not_found")
    if body.get("stream"):
        raise _bad("Streaming is not supported by routedvlm serve: the route is decided after the first stage. "
                   "Send the request with stream=false.", "stream", "unsupported_parameter")
    if body.get("n", 1) != 1:
        raise _bad("Only n=1 is supported.", "n", "unsupported_parameter")
    max_tokens = _int_field(body, "max_completion_tokens", 1, limits.max_tokens) or _int_field(body, "max_tokens", 1, limits.max_tokens)
    kwargs = body.get("chat_template_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise _bad("`chat_template_kwargs` must be an object.", "chat_template_kwargs", "invalid_value")
    thinking = kwargs.get("enable_thinking")
    if thinking is not None and not isinstance(thinking, bool):
        raise _bad(f"`chat_template_kwargs.enable_thinking` must be true or false. Got {thinking!r}.",
                   "chat_template_kwargs", "invalid_value")
    messages = parse_messages(body.get("messages"), limits)
    return ChatRequest(model, messages, max_tokens, thinking, bool(body.get("logprobs")),
                       _int_field(body, "top_logprobs", 0, 20) or 0, bool(body.get("continue_final_message")),
                       _int_field(body, "min_tokens", 0, limits.max_tokens))
