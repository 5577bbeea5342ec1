"""Request validation: an image (PIL or a file path) and a question, or Hugging Face chat `messages`.

Every public entry point of the pipeline turns its arguments into a `Request` here, so bad input fails
early with an `InputError` / `ImageLoadError` (both `ValueError`s) that says what to pass instead.
"""
from __future__ import annotations

import os
import pathlib
from dataclasses import dataclass, field

from routedvlm.router.errors import ImageLoadError, InputError, one_of

_ROLES = ("assistant", "system", "user")
_PART_TYPES = ("image", "text")


@dataclass
class Request:
    """One sample: a PIL RGB image, the question text, and earlier chat turns (text only) if any."""

    image: object
    question: str
    history: list = field(default_factory=list)

    def messages(self, question: str | None = None) -> list[dict]:
        """HF chat messages with the image first in the last user turn, and `question` (default: own) as its text."""
        text = self.question if question is None else question
        turn = {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}
        return [*self.history, turn]


def load_image(image):
    """A PIL RGB image from a PIL image or a path; raises ImageLoadError for a missing or unreadable file."""
    from PIL import Image, UnidentifiedImageError

    if isinstance(image, Image.Image):
        return image.convert("RGB") if image.mode != "RGB" else image
    if isinstance(image, (str, os.PathLike)):
        path = pathlib.Path(image)
        if not path.is_file():
            raise ImageLoadError(
                f"The `image` file {str(path)!r} does not exist. Pass an existing image file path or a PIL image."
            )
        try:
            with Image.open(path) as img:
                return img.convert("RGB")
        except (UnidentifiedImageError, OSError) as exc:
            raise ImageLoadError(
                f"The `image` file {str(path)!r} cannot be read as an image ({exc}). Pass a PNG/JPEG file or a PIL image."
            ) from None
    raise ImageLoadError(
        f"The `image` parameter must be a PIL image or a file path. Got {type(image).__name__} instead."
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
    return content


def from_messages(messages) -> Request:
    """Parse HF chat messages: the last message must be a user turn with one image part and text.

    An image part carries the image under `image` (PIL or path), `url` or `path`. Earlier turns must be
    text only; they are kept as history.
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
    images = [p for p in parts if p["type"] == "image"]
    if len(images) != 1:
        raise InputError(
            f"The last user message must hold exactly one image part. Got {len(images)}. "
            "Add {'type': 'image', 'image': <PIL image or path>}."
        )
    img = images[0]
    source = img.get("image", img.get("url", img.get("path")))
    if source is None:
        raise InputError("The image part must carry the image under 'image', 'url' or 'path'.")
    question = " ".join(p["text"] for p in parts if p["type"] == "text")
    history = []
    for msg in messages[:-1]:
        if any(p["type"] == "image" for p in _parts(msg.get("content"))):
            raise InputError("Only the last user message may hold an image; earlier turns must be text only.")
        history.append({"role": msg["role"], "content": msg["content"]})
    return Request(load_image(source), check_question(question), history)


def make_request(image=None, question=None, messages=None) -> Request:
    """A validated Request from (image, question) or from `messages` (not both)."""
    if messages is not None:
        if image is not None or question is not None:
            raise InputError("Pass either `messages` or (`image`, `question`), not both.")
        return from_messages(messages)
    if image is None:
        raise ImageLoadError("The `image` parameter is required: pass a PIL image or a file path (or `messages`).")
    question = check_question(question)
    return Request(load_image(image), question)
