"""The simulated inputs of a profile: image-size settings, seeded random images and synthetic prompts of a length.

Split from `profiler.py`; `from routedvlm.inference.profiling.profiler import random_image` keeps working.
"""
from __future__ import annotations

_FILLER = "Look at the chart and tell me which bar is the tallest, how tall it is, and why. "


def image_dims(size) -> tuple[int, int]:
    """(width, height) of an image size setting: 224 -> (224, 224), '96x16' -> (96, 16)."""
    if isinstance(size, str):
        w, h = size.lower().split("x")
        return int(w), int(h)
    return int(size), int(size)


def image_area(size) -> int:
    w, h = image_dims(size)
    return w * h


def check_image_sizes(values) -> list:
    from routedvlm.errors import ConfigError

    out = []
    for v in values or []:
        try:
            ok = isinstance(v, (int, str)) and not isinstance(v, bool) and min(image_dims(v)) > 0
        except ValueError:
            ok = False
        if not ok:
            raise ConfigError(f"The `image_sizes` setting must hold positive pixel sizes: 224 (square) or 'WxH' such "
                              f"as '96x16'. Got {v!r} in {values!r} instead.")
        out.append(v if isinstance(v, int) else "{}x{}".format(*image_dims(v)))
    if not out:
        raise ConfigError("The `image_sizes` setting must name at least one image size, e.g. [224, 448].")
    return out


def random_image(size, seed: int = 0):
    """An RGB image of uniform noise, `size` a side (square) or 'WxH' (deterministic for a seed)."""
    import numpy as np
    from PIL import Image

    w, h = image_dims(size)
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))


def synthetic_prompt(tokenizer, n_tokens: int) -> str:
    """A question text that the tokenizer encodes to `n_tokens` tokens (or as close as its merges allow)."""
    ids = []
    text = _FILLER
    while len(ids) < n_tokens:
        text = text * 2
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return tokenizer.decode(ids[:n_tokens], skip_special_tokens=True)
