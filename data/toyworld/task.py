"""The toy world's task: a seeded generator of bar-chart images with exact answers and reasoning traces.

Each image is 16x96 px: six 16x16 slots, some holding a red or blue bar whose height encodes a value 1-9.
The question asks for (sum of the red bars) x (number of blue bars). The number of bars N (2-6) is in the
question (a difficulty cheap features see); how many are red, their sum and the product are not.
Splits are disjoint by construction: every bar configuration belongs to exactly one split (by hash).
"""
from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass, field

import numpy as np

from routedvlm.errors import ConfigError, one_of

SPLITS = ("train", "label", "eval")
# Share of configuration-hash buckets (out of 100) that each split owns.
_SPLIT_BUCKETS = {"train": range(0, 80), "label": range(80, 90), "eval": range(90, 100)}
_SPLIT_SALT = {"train": 11, "label": 23, "eval": 37}
IMAGE_HEIGHT, SLOT, N_SLOTS = 16, 16, 6
IMAGE_WIDTH = SLOT * N_SLOTS
MIN_BARS, MAX_BARS = 2, 6
HARD_MIN_BARS = 5
COLOURS = {"red": (230, 40, 40), "blue": (40, 80, 230)}
QUESTION_TEMPLATE = "{n} bars. Red sum times blue count?"


@dataclass(frozen=True)
class Bar:
    """One bar: its slot (0-5), colour ('red' or 'blue') and value (1-9)."""

    slot: int
    colour: str
    value: int


@dataclass
class ToySample:
    """One generated sample: image, question, exact answer and the step-by-step trace that reaches it."""

    sample_id: str
    bars: tuple[Bar, ...]
    question: str
    answer: str
    reasoning: str
    difficulty: int = field(metadata={"help": "number of bars N (2-6); visible in the question"})
    split: str = "train"

    @property
    def hard(self) -> bool:
        return self.difficulty >= HARD_MIN_BARS

    @property
    def image(self):
        """The image as a PIL RGB image (built on access; the pixels are `render(bars)`)."""
        from PIL import Image

        return Image.fromarray(render(self.bars), mode="RGB")


def bar_height(value: int) -> int:
    """Pixel height of a bar of `value` (1-9 -> 2-14 px), bottom-aligned in its slot."""
    return int(round(1.5 * value + 0.5))


def render(bars) -> np.ndarray:
    """The image of `bars` as a (16, 96, 3) uint8 array on a black background."""
    img = np.zeros((IMAGE_HEIGHT, IMAGE_WIDTH, 3), dtype=np.uint8)
    for bar in bars:
        h = bar_height(bar.value)
        x0 = bar.slot * SLOT + 3
        img[IMAGE_HEIGHT - h:, x0:x0 + 10] = COLOURS[bar.colour]
    return img


def trace(bars) -> tuple[str, str]:
    """(reasoning, answer) for `bars`: `red=S. blue=B. S*B=P.` and `P`."""
    red = sum(b.value for b in bars if b.colour == "red")
    blue = sum(1 for b in bars if b.colour == "blue")
    product = red * blue
    return f"red={red}. blue={blue}. {red}*{blue}={product}.", str(product)


def final_value(reasoning: str) -> str:
    """The value a trace ends on (the text after its last '=' without the final period)."""
    return reasoning.rstrip(".").rsplit("=", 1)[-1]


def _config_bucket(bars) -> int:
    key = ";".join(f"{b.slot}{b.colour[0]}{b.value}" for b in bars).encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=4).digest(), "big") % 100


def _draw_bars(rng: np.random.Generator, n: int, min_value: int = 1) -> tuple[Bar, ...]:
    slots = np.sort(rng.choice(N_SLOTS, size=n, replace=False))
    n_red = int(rng.integers(1, n))  # at least one red and one blue bar
    colours = ["red"] * n_red + ["blue"] * (n - n_red)
    rng.shuffle(colours)
    values = rng.integers(min_value, 10, size=n)
    return tuple(Bar(int(s), c, int(v)) for s, c, v in zip(slots, colours, values))


def check_split(split: str) -> str:
    if split not in SPLITS:
        raise ConfigError(f"`split` must be {one_of(SPLITS)}; got {split!r}. Pick one of the toy world's splits.")
    return split


def make_samples(split: str, n: int, seed: int = 0, *, min_bars: int = MIN_BARS, min_value: int = 1) -> list[ToySample]:
    """`n` samples of `split`, deterministic in (split, seed); N is uniform over `min_bars`-6 bars, bar values over
    `min_value`-9 (the defaults are the toy world's distribution; larger ones give a shifted stream of harder
    charts: more bars and larger sums, which the question does not reveal).

    Configurations are drawn until one falls in the split's hash buckets, so no bar configuration
    appears in two splits, whatever the seeds.
    """
    check_split(split)
    if n < 0:
        raise ConfigError(f"`n` must be >= 0; got {n}.")
    if not MIN_BARS <= min_bars <= MAX_BARS or not 1 <= min_value <= 9:
        raise ConfigError(f"`min_bars` must be in {MIN_BARS}-{MAX_BARS} and `min_value` in 1-9; got {min_bars}, {min_value}.")
    rng = np.random.default_rng([seed, _SPLIT_SALT[split]])
    buckets = _SPLIT_BUCKETS[split]
    samples = []
    while len(samples) < n:
        n_bars = int(rng.integers(min_bars, MAX_BARS + 1))
        bars = _draw_bars(rng, n_bars, min_value)
        if _config_bucket(bars) not in buckets:
            continue
        reasoning, answer = trace(bars)
        samples.append(ToySample(
            sample_id=f"toy-{split}-{seed}-{len(samples):06d}", bars=bars,
            question=QUESTION_TEMPLATE.format(n=n_bars), answer=answer, reasoning=reasoning,
            difficulty=n_bars, split=split))
    return samples


def png_bytes(sample: ToySample) -> bytes:
    buf = io.BytesIO()
    sample.image.save(buf, format="PNG")
    return buf.getvalue()


def write_dataset(samples, path) -> str:
    """Write samples as a local parquet data set: sample_id, image (PNG bytes), question, answer,
    difficulty, reasoning. Returns the path written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({
        "sample_id": [s.sample_id for s in samples],
        "image": pa.array([png_bytes(s) for s in samples], type=pa.binary()),
        "question": [s.question for s in samples],
        "answer": [s.answer for s in samples],
        "difficulty": pa.array([s.difficulty for s in samples], type=pa.int32()),
        "reasoning": [s.reasoning for s in samples],
    })
    pq.write_table(table, str(path))
    return str(path)
