"""Images from what clients send: base64 `data:` URLs, files, http(s) URLs, with decompression-bomb checks.

`open_image(raw, formats=..., max_pixels=...)` reads the size from the header before decoding any pixels, so a
small file that declares 20000x20000 pixels is refused without being decoded. The server accepts only
`SAFE_FORMATS` (no exotic or external decoders); the Python API reads whatever PIL reads from a trusted path.
"""
from __future__ import annotations

import base64
import binascii
import io

from routedvlm.errors import ImageLoadError

SAFE_FORMATS = ("BMP", "GIF", "JPEG", "PNG", "WEBP")
MEDIA_TYPES = {"image/bmp": "BMP", "image/gif": "GIF", "image/jpeg": "JPEG", "image/jpg": "JPEG",
               "image/png": "PNG", "image/webp": "WEBP"}
FETCH_MAX_BYTES = 64 * 2**20


class ImageInputError(ImageLoadError):
    """An image a client sent cannot be used; `code` is the OpenAI-style error code the server answers with."""

    def __init__(self, message: str, code: str = "invalid_image"):
        super().__init__(message)
        self.code = code


def split_data_url(url: str, *, media_types=None) -> tuple[str, bytes]:
    """(media type, raw bytes) of a `data:<type>;base64,<data>` URL; `media_types` limits the accepted types."""
    header, _, payload = url.partition(",")
    media = header[len("data:"):].split(";", 1)[0].strip().lower()
    if ";base64" not in header or not payload:
        raise ImageInputError("An image data URL must be base64-encoded: 'data:image/<type>;base64,<data>'.",
                              "invalid_image_url")
    if media_types is not None and media not in media_types:
        raise ImageInputError(f"The image media type {media or '(none)'!r} is not supported; send one of "
                              f"{sorted(media_types)}.", "unsupported_media_type")
    try:
        return media, base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ImageInputError("An image data URL holds invalid base64 data.", "invalid_image") from None


def open_image(raw: bytes, *, formats=None, max_pixels: int | None = None):
    """A PIL RGB image from encoded bytes. The pixel count is checked from the header first (`max_pixels`, and
    PIL's own decompression-bomb limit), so oversized images are refused before their pixels are decoded."""
    from PIL import Image, UnidentifiedImageError

    try:
        img = Image.open(io.BytesIO(raw), formats=list(formats) if formats else None)
        w, h = img.size
    except Image.DecompressionBombError as exc:
        raise ImageInputError(f"An image is too large to decode safely ({exc}).", "image_too_large") from None
    except (UnidentifiedImageError, ValueError, OSError, SyntaxError):
        kinds = f" ({', '.join(formats)})" if formats else " (PNG, JPEG, ...)"
        raise ImageInputError(f"The image data is not a readable image{kinds}.", "invalid_image") from None
    if max_pixels is not None and w * h > max_pixels:
        raise ImageInputError(f"An image has {w}x{h} = {w * h} pixels, over the limit of {max_pixels}.",
                              "image_too_large")
    try:
        return img.convert("RGB")
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
        raise ImageInputError("The image data is truncated or corrupt.", "invalid_image") from None


def fetch_image_bytes(url: str, *, timeout: float = 30.0, max_bytes: int = FETCH_MAX_BYTES) -> bytes:
    """GET an http(s) image URL (the Python API only; `routedvlm serve` never fetches URLs)."""
    import httpx

    try:
        with httpx.stream("GET", url, timeout=timeout, follow_redirects=True) as resp:
            resp.raise_for_status()
            chunks, size = [], 0
            for chunk in resp.iter_bytes():
                size += len(chunk)
                if size > max_bytes:
                    raise ImageInputError(f"The image at {url} is larger than {max_bytes} bytes.", "image_too_large")
                chunks.append(chunk)
    except httpx.HTTPError as exc:
        raise ImageLoadError(f"The image URL {url!r} cannot be fetched ({type(exc).__name__}: {exc}). "
                             "Pass a local path, a data URL or a PIL image instead.") from None
    return b"".join(chunks)
