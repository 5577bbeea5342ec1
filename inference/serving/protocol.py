"""The server side of the OpenAI chat-completions shape: request validation with limits, OpenAI-shaped errors.

`parse_chat_request(body, limits, models, routed_model=...)` turns a JSON body into a `ChatRequest` holding
Hugging Face chat messages (decoded PIL images; none for a text-only chat) or raises `APIError` (status,
message, type, param, code), which the server renders as `{"error": {"message", "type", "param", "code"}}`.
Images must be base64 `data:` URLs of a `SAFE_FORMATS` type: the server never fetches a URL or reads a
path named by a client. Sampling parameters (`ChatRequest.sampling`, `n`): sampling_params.py; role "developer" is
read as "system" (as vLLM); an assistant turn may have content null, one with `tool_calls` is a 400.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ..image_io import MEDIA_TYPES, SAFE_FORMATS, ImageInputError, open_image, split_data_url
from .api_error import APIError  # noqa: F401 - re-exported: the serving modules import it from here

logger = logging.getLogger(__name__)
ROLES = ("assistant", "developer", "system", "user")  # "developer" is read as "system" (as vLLM)
# fields read below or in sampling_params.py, or that change nothing here
KNOWN = {"model", "messages", "stream", "stream_options", "max_tokens", "max_completion_tokens", "logprobs",
         "top_logprobs", "chat_template_kwargs", "min_tokens", "continue_final_message", "add_generation_prompt",
         "user", "metadata", "store", "service_tier", "parallel_tool_calls", "skip_special_tokens", "prompt", "echo",
         "suffix", "include_stop_str_in_output", "spaces_between_special_tokens", "priority", "request_id", "_raw_prompt"}
PLAIN_ONLY = ("logprobs", "top_logprobs", "min_tokens", "continue_final_message")
_warned: set = set()


@dataclass(frozen=True)
class Limits:
    """Request limits of `routedvlm serve`."""

    max_images: int = field(default=1, metadata={"help": "max images per request (the pipeline answers about one image)"})
    max_image_pixels: int = field(default=4096 * 4096, metadata={"help": "max width*height of an image"})
    max_image_bytes: int = field(default=20 * 2**20, metadata={"help": "max decoded bytes of an image"})
    max_text_chars: int = field(default=20_000, metadata={"help": "max characters of text over all messages"})
    max_tokens: int = field(default=4096, metadata={"help": "max `max_tokens` a client may ask for"})
    max_body_bytes: int = field(default=32 * 2**20, metadata={"help": "max bytes of a request body"})
    max_messages: int = field(default=64, metadata={"help": "max messages per request"})
    max_content_parts: int = field(default=64, metadata={"help": "max content parts over all messages"})
    max_prompt_tokens: int | None = field(default=None, metadata={
        "help": "max prompt tokens after the chat template, image tokens included (default: what fits the context)"})
    max_aspect_ratio: float = field(default=100.0, metadata={"help": "max long side / short side of an image"})


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
    stream: bool = False
    include_usage: bool = False
    sampling: object = None  # a sampling.Sampling, or None: greedy
    n: int = 1
    continuous_usage: bool = False  # stream_options.continuous_usage_stats: usage in every chunk (vLLM)
    raw_prompt: str | None = None  # /v1/completions: the prompt a plain model continues as it is


def _bad(message, param=None, code=None, status=400):
    return APIError(status, message, param=param, code=code)


def decode_image(url, limits: Limits, param: str):
    """A PIL RGB image from a `data:image/...;base64,...` URL, within the type, byte and pixel limits."""
    if not isinstance(url, str) or not url.startswith("data:"):
        raise _bad("Images must be base64 data URLs ('data:image/png;base64,...'); this server fetches no URLs.",
                   param, "invalid_image_url")
    if len(url.partition(",")[2]) * 3 // 4 > limits.max_image_bytes:
        raise _bad(f"An image is larger than the server's limit of {limits.max_image_bytes} bytes.", param, "image_too_large")
    try:
        image = open_image(split_data_url(url, media_types=MEDIA_TYPES)[1], formats=SAFE_FORMATS,
                           max_pixels=limits.max_image_pixels)
    except ImageInputError as exc:
        raise _bad(str(exc), param, exc.code) from None
    w, h = image.size
    if max(w, h) > limits.max_aspect_ratio * min(w, h):
        raise _bad(f"An image of {w}x{h} pixels is too elongated: this server accepts a long side of at most "
                   f"{limits.max_aspect_ratio:g} times the short side. Pad or crop it.", param, "image_aspect_ratio")
    return image


def _text(text: str, param: str) -> str:
    """`text`, refused when it holds a lone surrogate (valid JSON escapes, but no UTF-8 text)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _bad(f"The text holds a lone UTF-16 surrogate ({text[exc.start]!a} at character {exc.start}), which is "
                   "not a character. Send valid Unicode text.", param, "invalid_text") from None
    return text


def _content(content, param: str, images: list) -> tuple[list, int]:
    """HF content parts of one message and its text length."""
    if isinstance(content, str):
        return [{"type": "text", "text": _text(content, param)}], len(content)
    if not isinstance(content, list):
        raise _bad(f"`content` must be a string or a list of parts. Got {type(content).__name__}.", param, "invalid_content")
    parts, chars = [], 0
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        p = f"{param}[{j}]"
        if kind == "text" and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": _text(part["text"], p)})
            chars += len(part["text"])
        elif kind == "image_url":
            spec = part.get("image_url")
            images.append((p, spec.get("url") if isinstance(spec, dict) else spec))
            parts.append({"type": "image", "image": None})
        else:
            raise _bad(f"A content part must be {{'type': 'text', 'text': str}} or {{'type': 'image_url', 'image_url': "
                       f"{{'url': 'data:...'}}}}. Got type {kind!r}.", p, "invalid_content")
    return parts, chars


def parse_messages(messages, limits: Limits) -> list:
    if not isinstance(messages, list) or not messages:
        raise _bad("`messages` is required: a non-empty list of {'role', 'content'} objects.", "messages", "missing_messages")
    if len(messages) > limits.max_messages:
        raise _bad(f"The request holds {len(messages)} messages; this server accepts at most {limits.max_messages} "
                   "(routedvlm serve --max-messages).", "messages", "too_many_messages")
    out, images, chars, n_parts = [], [], 0, 0
    for i, msg in enumerate(messages):
        role = msg.get("role") if isinstance(msg, dict) else None
        if role not in ROLES:
            why = (" Tool calls are not supported by this server: send the tool's result as a user message."
                   if role in ("tool", "function") else "")
            raise _bad(f"A message's `role` must be one of 'assistant', 'developer', 'system' or 'user'. Got {role!r}."
                       + why, f"messages[{i}].role", "invalid_role")
        if role == "assistant" and msg.get("tool_calls"):
            raise _bad("An assistant message with `tool_calls` is not supported: this server's models call no tools. "
                       "Remove the tool calls (and the tool messages) from the history, or put their text in `content`.",
                       f"messages[{i}].tool_calls", "unsupported_parameter")
        if msg.get("content") is None and role == "assistant":
            msg = {**msg, "content": ""}  # an assistant turn without text (OpenAI allows content null there)
        if "content" not in msg or msg["content"] is None:
            raise _bad(f"A {role} message needs `content` (a string or a list of parts); only an assistant message "
                       "may have content null.", f"messages[{i}].content", "invalid_content")
        role = "system" if role == "developer" else role
        n_parts += len(msg["content"]) if isinstance(msg["content"], list) else 1
        if n_parts > limits.max_content_parts:
            raise _bad(f"The request holds more than {limits.max_content_parts} content parts; this server accepts at "
                       "most that many over all messages (routedvlm serve --max-content-parts).", "messages",
                       "too_many_content_parts")
        parts, n = _content(msg["content"], f"messages[{i}].content", images)
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


def check_unknown(body: dict) -> None:
    """Log (once each) the request fields this server does not read."""
    from .sampling_params import REFUSED, SAMPLING_FIELDS

    for name in sorted(set(body) - KNOWN - SAMPLING_FIELDS - set(REFUSED)):
        if name not in _warned:
            _warned.add(name)
            logger.warning("ignoring the unknown request field %r (logged once)", name)


def _stream_options(body) -> tuple[bool, bool]:
    """(include_usage, continuous_usage_stats) of `stream_options`."""
    opts = body.get("stream_options")
    if opts is None:
        return False, False
    if not body.get("stream"):
        raise _bad("`stream_options` is only allowed when `stream` is true.", "stream_options", "invalid_value")
    names = ("include_usage", "continuous_usage_stats")
    if not isinstance(opts, dict) or any(k not in names or not isinstance(v, bool) for k, v in opts.items()):
        raise _bad(f"`stream_options` must be {{'include_usage': bool, 'continuous_usage_stats': bool}}. Got {opts!r}.",
                   "stream_options", "unsupported_parameter")
    return bool(opts.get("include_usage")), bool(opts.get("continuous_usage_stats"))


def _routed_checks(body, thinking) -> None:
    """Parameters the routed model does not take: the router decides the stages and the thinking."""
    for name in PLAIN_ONLY:
        if body.get(name):
            raise _bad(f"`{name}` is supported by the plain models 'small' and 'large' only; the routed model's "
                       "final answer comes from whichever stage the router picks. Remove it.", name, "unsupported_parameter")
    if thinking is not None:
        raise _bad("`chat_template_kwargs.enable_thinking` is not taken by the routed model: its router decides which "
                   "model reasons. Remove it, or ask the plain models 'small' / 'large'.", "chat_template_kwargs",
                   "unsupported_parameter")


def _thinking(body):
    kwargs = body.get("chat_template_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise _bad("`chat_template_kwargs` must be an object.", "chat_template_kwargs", "invalid_value")
    thinking = kwargs.get("enable_thinking")
    if thinking is not None and not isinstance(thinking, bool):
        raise _bad(f"`chat_template_kwargs.enable_thinking` must be true or false. Got {thinking!r}.",
                   "chat_template_kwargs", "invalid_value")
    return thinking


def parse_chat_request(body, limits: Limits, models, routed_model: str | None = None) -> ChatRequest:
    """Validate a chat-completions JSON body against `limits` and the served model ids."""
    if not isinstance(body, dict):
        raise _bad("The request body must be a JSON object.", None, "invalid_json")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("`model` is required: one of the ids listed by GET /v1/models.", "model", "missing_model")
    if model not in models:
        raise APIError(404, f"The model {model!r} does not exist on this server; use one of {sorted(models)}.",
                       param="model", code="model_not_found")
    if not isinstance(body.get("stream", False), bool):
        raise _bad(f"`stream` must be true or false. Got {body['stream']!r}.", "stream", "invalid_value")
    from .sampling_params import parse_sampling

    sampling, n = parse_sampling(body)
    check_unknown(body)
    include_usage, continuous = _stream_options(body)
    if n > 1 and body.get("stream"):
        raise _bad(f"`n` = {n} with `stream` is not supported: a stream carries one choice here. Send n streamed "
                   "requests, or stream=false.", "n", "unsupported_parameter")
    max_tokens = _int_field(body, "max_completion_tokens", 1, limits.max_tokens) or _int_field(body, "max_tokens", 1, limits.max_tokens)
    thinking = _thinking(body)
    if model == routed_model:
        _routed_checks(body, thinking)
    messages = parse_messages(body.get("messages"), limits)
    return ChatRequest(model, messages, max_tokens, thinking, bool(body.get("logprobs")),
                       _int_field(body, "top_logprobs", 0, 20) or 0, bool(body.get("continue_final_message")),
                       _int_field(body, "min_tokens", 0, limits.max_tokens), bool(body.get("stream")), include_usage,
                       sampling, n, continuous, body.get("_raw_prompt"))


def check_context(model: str, context: int | None, prompt_tokens: int, max_tokens: int) -> None:
    """A 400 when the prompt plus `max_tokens` does not fit the model's context (its position limit)."""
    if context is not None and prompt_tokens + max_tokens > context:
        raise _bad(f"The model {model!r} has a context of {context} tokens, but the request needs {prompt_tokens + max_tokens} "
                   f"({prompt_tokens} in the messages, {max_tokens} in the completion). Reduce `max_tokens` or the "
                   "messages.", "max_tokens", "context_length_exceeded")
