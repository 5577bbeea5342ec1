"""Cheap features, `feat__<stages>__<name>`, computed by the SAME code in the labeller and the runtime.

Each feature is one function registered under its column name; `<stages>` says which strategy stages
must have run (`prompt` = free). On a ladder every model's direct answer has the same features as small's and
large's (`feat__<m>_direct__...`) and every two models an agreement feature (`register_ladder`). `compute_features(question, images, stages)` returns every feature whose
stages are available. Stage outputs are any objects (or dicts) with `answer`, `token_logprobs` and
`first_token_entropy`; the image features read one 64-px thumbnail per image, whose statistics are computed together
once (`image_stats`), so every prompt feature of a request costs about 0.1 ms. No pandas here.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Mapping, Sequence

from routedvlm.router.strategies import feature_stages

from .answers import answer_parsed, answers_agree, is_yes_no_question, option_letters

FEATURES: dict[str, Callable[["FeatureContext"], float]] = {}
_THUMB = 64


def feature(name: str):
    """Register a feature function under its column name (validated against the stage names)."""
    feature_stages(name)

    def register(fn):
        FEATURES[name] = fn
        return fn

    return register


def _get(obj: Any, key: str, default=None):
    return obj.get(key, default) if isinstance(obj, Mapping) else getattr(obj, key, default)


@dataclass
class FeatureContext:
    """What features may look at: the prompt text, the images, and the outputs of stages that ran."""

    question: str
    images: Sequence[Any] = ()
    stages: Mapping[str, Any] = field(default_factory=dict)

    @cached_property
    def thumbs(self):
        import numpy as np

        out = []
        for im in self.images:
            t = thumbnail(im)
            pixels = np.frombuffer(t.tobytes(), dtype=np.uint8).reshape(t.height, t.width, 3)
            out.append(pixels.astype(np.float32) / 255.0)
        return out

    @cached_property
    def image_stats(self) -> list[dict]:
        """Per image, the statistics of its thumbnail (`image_stats`), computed once for every image feature."""
        return [image_stats(a) for a in self.thumbs]

    def stage(self, name: str):
        return self.stages[name]


def thumbnail(im):
    """The image features' RGB thumbnail of `im`: what `im.convert("RGB")` then `.thumbnail((64, 64))` gives, without
    the full-size copy `convert` makes of an image that is RGB already (6 ms of a 1920x1080 request at load 10): the
    same size rule as Pillow's `thumbnail` and the same `resize` call (a converted copy never has a draft mode)."""
    from PIL import Image

    t = im if im.mode == "RGB" else im.convert("RGB")
    x, y = _THUMB, _THUMB
    if x >= t.width and y >= t.height:
        return t
    aspect = t.width / t.height
    if x / y >= aspect:
        x = _round_aspect(y * aspect, key=lambda n: abs(aspect - n / y))
    else:
        y = _round_aspect(x / aspect, key=lambda n: 0 if n == 0 else abs(aspect - x / n))
    return t if t.size == (x, y) else t.resize((x, y), Image.Resampling.BICUBIC, reducing_gap=2.0)


def _round_aspect(number: float, key) -> int:
    return max(min(math.floor(number), math.ceil(number), key=key), 1)


def _mean_over_images(ctx: FeatureContext, stat: str) -> float:
    vals = [stats[stat] for stats in ctx.image_stats]
    return float(sum(vals) / len(vals)) if vals else 0.0


# ---- prompt features (free) ----
@feature("feat__prompt__question_chars")
def _q_chars(ctx):
    return float(len(ctx.question))


@feature("feat__prompt__question_words")
def _q_words(ctx):
    return float(len(ctx.question.split()))


@feature("feat__prompt__question_digits")
def _q_digits(ctx):
    return float(sum(c.isdigit() for c in ctx.question))


@feature("feat__prompt__option_count")
def _options(ctx):
    return float(len(option_letters(ctx.question)))


@feature("feat__prompt__is_yes_no")
def _yes_no(ctx):
    return float(is_yes_no_question(ctx.question))


@feature("feat__prompt__asks_number")
def _asks_number(ctx):
    pattern = r"\b(how many|how much|what is the (sum|total|value|number|product|difference))\b"
    return float(bool(re.search(pattern, ctx.question, re.IGNORECASE)))


@feature("feat__prompt__image_count")
def _image_count(ctx):
    return float(len(ctx.images))


@feature("feat__prompt__image_megapixels")
def _megapixels(ctx):
    return float(sum(im.width * im.height for im in ctx.images) / 1e6)


@feature("feat__prompt__image_aspect")
def _aspect(ctx):
    return float(ctx.images[0].width / max(ctx.images[0].height, 1)) if ctx.images else 0.0


@feature("feat__prompt__image_gray_std")
def _gray_std(ctx):
    return _mean_over_images(ctx, "gray_std")


@feature("feat__prompt__image_edge_density")
def _edges(ctx):
    return _mean_over_images(ctx, "edge_density")


@feature("feat__prompt__image_colorfulness")
def _colorfulness(ctx):
    return _mean_over_images(ctx, "colorfulness")


@feature("feat__prompt__image_distinct_colors")
def _distinct_colors(ctx):
    return _mean_over_images(ctx, "distinct_colors")


def image_stats(a) -> dict:
    """The image features' statistics of one RGB thumbnail `a` (float32, H x W x 3, in [0, 1]), computed together so
    that the gray image and the colour channels are read once (and with numpy's mean/std operations called directly:
    the same operations in the same order as `np.mean`/`np.std`, so the same bits, without their Python wrappers)."""
    import numpy as np

    g = np.add.reduce(a, axis=2)  # a.mean(axis=2), as numpy's `_methods._mean` computes it
    np.true_divide(g, np.intp(3), out=g, casting="unsafe")
    edges = 0.0 if min(g.shape) < 2 else (_mean(abs(g[1:, :] - g[:-1, :])) + _mean(abs(g[:, 1:] - g[:, :-1]))) / 2
    rg = a[..., 0] - a[..., 1]
    yb = 0.5 * (a[..., 0] + a[..., 1]) - a[..., 2]  # Hasler & Suesstrunk (2003) colourfulness
    q = (a * 7.999).astype(np.int32)  # 8 levels per channel: 512 colour cells, counted (what np.unique would count)
    cells = np.bincount((q[..., 0] * 64 + q[..., 1] * 8 + q[..., 2]).ravel(), minlength=512)
    return {"gray_std": _std(g), "edge_density": edges,
            "colorfulness": math.hypot(_std(rg), _std(yb)) + 0.3 * math.hypot(_mean(rg), _mean(yb)),
            "distinct_colors": float(np.count_nonzero(cells))}


def _mean(x):
    """`np.mean(x)` of a float32 array: the sum, divided by the count as numpy's `_methods._mean` does."""
    import numpy as np

    s = np.add.reduce(x, axis=None)
    return s.dtype.type(s / np.intp(x.size))


def _std(x):
    """`np.std(x)` of a float32 array, step by step as numpy's `_methods._var` and `_std` do."""
    import numpy as np

    n = np.intp(x.size)
    m = np.add.reduce(x, axis=None, keepdims=True)
    np.true_divide(m, n, out=m, casting="unsafe")
    d = np.subtract(x, m)
    np.square(d, out=d)
    s = np.add.reduce(d, axis=None)
    v = s.dtype.type(s / n)
    return v.dtype.type(np.sqrt(v))


# ---- stage features: one set per answering stage ----
def _stage_features(stage: str) -> None:
    def logprobs(ctx):
        return [float(x) for x in (_get(ctx.stage(stage), "token_logprobs") or [])]

    feature(f"feat__{stage}__logprob_mean")(
        lambda ctx: float(sum(logprobs(ctx)) / len(logprobs(ctx))) if logprobs(ctx) else 0.0
    )
    feature(f"feat__{stage}__logprob_min")(lambda ctx: float(min(logprobs(ctx), default=0.0)))
    feature(f"feat__{stage}__first_token_entropy")(
        lambda ctx: float(_get(ctx.stage(stage), "first_token_entropy") or 0.0)
    )
    feature(f"feat__{stage}__answer_tokens")(lambda ctx: float(len(logprobs(ctx))))
    feature(f"feat__{stage}__answer_chars")(lambda ctx: float(len((_get(ctx.stage(stage), "answer") or "").strip())))
    feature(f"feat__{stage}__parsed")(
        lambda ctx: float(answer_parsed(_get(ctx.stage(stage), "answer") or "", ctx.question))
    )


_stage_features("large_direct")
_stage_features("small_direct")


def _agreement(upper: str, lower: str) -> None:
    """`feat__<upper>+<lower>__agree`: 1.0 when the two direct answers agree (answers.answers_agree), else 0.0."""

    def agree(ctx):
        a = _get(ctx.stage(upper), "answer") or ""
        b = _get(ctx.stage(lower), "answer") or ""
        return float(answers_agree(a, b, ctx.question))

    feature(f"feat__{upper}+{lower}__agree")(agree)


_agreement("large_direct", "small_direct")


def register_ladder(aliases: Sequence[str]) -> None:
    """Register the features of a ladder's models (idempotent): per model above the pair `feat__<m>_direct__...` (the
    same six as small/large), and per two models a < b `feat__<b>_direct+<a>_direct__agree` (the more expensive
    first, as the pair's `feat__large_direct+small_direct__agree`). Called for the stages a computation sees."""
    from routedvlm.router.strategies import alias_rank

    ordered = sorted(dict.fromkeys(aliases), key=alias_rank)
    for m in ordered:
        if f"feat__{m}_direct__logprob_mean" not in FEATURES:
            _stage_features(f"{m}_direct")
    for i, b in enumerate(ordered):
        for a in ordered[:i]:
            if f"feat__{b}_direct+{a}_direct__agree" not in FEATURES:
                _agreement(f"{b}_direct", f"{a}_direct")


def _register_for(stages: Sequence[str] = (), names: Sequence[str] = ()) -> None:
    """Register the ladder features that `stages` (or feature `names`) refer to."""
    found = [s for s in stages if s != "prompt"] + [st for n in names for st in feature_stages(n) if st != "prompt"]
    aliases = [s[: -len("_direct")] for s in found if s.endswith("_direct")]
    if any(a not in ("small", "large") for a in aliases):
        register_ladder(aliases)


def feature_names(stages: Sequence[str] = ("prompt", "large_direct", "small_direct")) -> list[str]:
    """Every registered feature computable when `stages` (plus `prompt`) have run, in registry order."""
    _register_for(stages)
    have = {"prompt", *stages}
    return [n for n in FEATURES if set(feature_stages(n)) <= have]


def compute_features(
    question: str, images: Sequence[Any] = (), stages: Mapping[str, Any] | None = None, names: Sequence[str] | None = None
) -> dict[str, float]:
    """Features for one sample: all whose stages are in `stages` (or exactly `names`)."""
    ctx = FeatureContext(question=question, images=list(images), stages=dict(stages or {}))
    if names is None or not all(n in FEATURES for n in names):  # a request's names are registered after its first
        _register_for(tuple(ctx.stages), names or ())
    wanted = list(names) if names is not None else feature_names(tuple(ctx.stages))
    return {name: FEATURES[name](ctx) for name in wanted}
