"""Request validation: an image (or none, for a text-only chat) and a question, or chat `messages`.

Every public entry point of the pipeline turns its arguments into a `Request` here, so bad input fails
early with an `InputError` / `ImageLoadError` (both `ValueError`s) that says what to pass instead.
`messages` may use the transformers parts (`{"type": "image", "image": PIL | path}`, `{"type": "image",
"url": ...}`) or the OpenAI parts (`{"type": "image_url", "image_url": {"url": ...}}`); an image source is a
PIL image, a file path, a `file://`, `data:` or http(s) URL.
"""
from __future__ import annotations

import os
import pathlib
from dataclasses import dataclass, field

from routedvlm.errors import ImageLoadError, InputError, one_of

from .image_io import fetch_image_bytes, open_image, split_data_url

_ROLES = ("assistant", "system", "user")
_PART_TYPES = ("image", "image_url", "text")


@dataclass
class Request:
    """One sample: a PIL RGB image (None for a text-only chat), the question text, earlier (text) chat turns."""

    image: object
    question: str
    history: list = field(default_factory=list)

    def messages(self, question: str | None = None) -> list[dict]:
        """HF chat messages with the image (if any) first in the last user turn, and `question` (default: own)."""
        text = self.question if question is None else question
        image = [{"type": "image"}] if self.image is not None else []
        return [*self.history, {"role": "user", "content": [*image, {"type": "text", "text": text}]}]


def _load_file(path: pathlib.Path):
    from PIL import Image, UnidentifiedImageError

    if not path.is_file():
        raise ImageLoadError(f"The `image` file {str(path)!r} does not exist. Pass an existing image file path or a PIL image.")
    try:
        with Image.open(path) as img:
            return img.convert("RGB")
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as exc:
        raise ImageLoadError(
            f"The `image` file {str(path)!r} cannot be read as an image ({exc}). Pass a PNG/JPEG file or a PIL image."
        ) from None


def load_image(image):
    """A PIL RGB image from a PIL image, a path, or a `file://`, `data:` or http(s) URL string."""
    from PIL import Image

    if isinstance(image, Image.Image):
        return image.convert("RGB") if image.mode != "RGB" else image
    if isinstance(image, str) and image.startswith("data:"):
        return open_image(split_data_url(image)[1])
    if isinstance(image, str) and image.startswith(("http://", "https://")):
        return open_image(fetch_image_bytes(image))
    if isinstance(image, str) and image.startswith("file://"):
        return _load_file(pathlib.Path(image[len("file://"):]))
    if isinstance(image, (str, os.PathLike)):
        return _load_file(pathlib.Path(image))
    raise ImageLoadError(
        f"The `image` parameter must be a PIL image, a file path or a data/http(s) URL. Got {type(image).__name__} instead."
    )


def check_question(question) -> str:
    if not isinstance(question, str) or not question.strip():
        raise InputError(
            f"The `question` parameter must be a non-empty string. Got {question!r} instead. "
            "Pass the question text, or chat `messages` with a text part in the last user turn."
        )
    return question


def check_keep_tokens(keep_tokens) -> int:
    if isinstance(keep_tokens, bool) or not isinstance(keep_tokens, int) or keep_tokens <= 0:
        raise InputError(
            f"The `keep_tokens` parameter must be a positive integer (e.g. 16, 32, 64). Got {keep_tokens!r} instead."
        )
    return keep_tokens


def _parts(content) -> list[dict]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise InputError(f"A message's `content` must be a string or a list of parts. Got {type(content).__name__}.")
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in _PART_TYPES:
            raise InputError(f"A message part's `type` must be one of {one_of(_PART_TYPES)}. Got {kind!r} instead.")
        if kind == "text" and not isinstance(part.get("text"), str):
            raise InputError(f"A text part must be {{'type': 'text', 'text': <str>}}. Got {part!r}.")
    return content


def image_source(part: dict):
    """The image a part carries: transformers' `image` / `url` / `path` keys or OpenAI's `image_url`."""
    if part["type"] == "image_url":
        spec = part.get("image_url")
        source = spec.get("url") if isinstance(spec, dict) else spec
    else:
        source = next((part[k] for k in ("image", "url", "path") if part.get(k) is not None), None)
    if source is None:
        raise InputError("An image part must carry its image: {'type': 'image', 'image': <PIL image or path>}, "
                         "{'type': 'image', 'url': <path or URL>} or {'type': 'image_url', 'image_url': {'url': ...}}.")
    return source


def _text_turn(msg: dict) -> dict:
    parts = _parts(msg.get("content"))
    if any(p["type"] != "text" for p in parts):
        raise InputError("Only the last user message may hold an image; earlier turns must be text only.")
    content = msg["content"] if isinstance(msg["content"], str) else [{"type": "text", "text": p["text"]} for p in parts]
    return {"role": msg["role"], "content": content}


def from_messages(messages) -> Request:
    """Parse chat messages: the last message is a user turn with text and at most one image part.

    Earlier turns must be text only; they are kept as history. Without an image the chat is text-only.
    """
    if not isinstance(messages, list) or not messages:
        raise InputError("The `messages` parameter must be a non-empty list of {'role', 'content'} dicts.")
    for msg in messages:
        role = msg.get("role") if isinstance(msg, dict) else None
        if role not in _ROLES:
            raise InputError(f"A message's `role` must be one of {one_of(_ROLES)}. Got {role!r} instead.")
    last = messages[-1]
    if last["role"] != "user":
        raise InputError(f"The last message must have role 'user'. Got {last['role']!r} instead.")
    parts = _parts(last.get("content"))
    images = [p for p in parts if p["type"] != "text"]
    if len(images) > 1:
        raise InputError(f"The last user message may hold at most one image part. Got {len(images)}.")
    question = " ".join(p["text"] for p in parts if p["type"] == "text")
    history = [_text_turn(msg) for msg in messages[:-1]]
    image = load_image(image_source(images[0])) if images else None
    return Request(image, check_question(question), history)


def make_request(image=None, question=None, messages=None) -> Request:
    """A validated Request from (image, question) or from `messages` (not both); `image=None` is a text-only chat."""
    if messages is not None:
        if image is not None or question is not None:
            raise InputError("Pass either `messages` or (`image`, `question`), not both.")
        return from_messages(messages)
    question = check_question(question)
    return Request(None if image is None else load_image(image), question)
