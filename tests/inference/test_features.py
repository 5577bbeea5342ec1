"""Features: worked examples by hand, stage availability, and agreement/parse rules."""
import math

import pytest
from PIL import Image

from routedvlm.inference.answers import answers_agree, answer_parsed, canonical_answer, normalize_answer
from routedvlm.inference.features import FEATURES, compute_features, feature_names
from routedvlm.router.strategies import feature_stages


def test_every_feature_name_follows_the_schema():
    for name in FEATURES:
        assert feature_stages(name)  # raises on a malformed name


def test_prompt_features_worked_example():
    img = Image.new("RGB", (40, 20), (255, 0, 0))
    img.putpixel((0, 0), (0, 0, 255))
    q = "How many bars are red?\nA. 2\nB. 3"
    f = compute_features(q, [img])
    assert f["feat__prompt__question_chars"] == len(q)
    assert f["feat__prompt__question_words"] == 9  # How many bars are red? A. 2 B. 3
    assert f["feat__prompt__question_digits"] == 2
    assert f["feat__prompt__option_count"] == 2
    assert f["feat__prompt__asks_number"] == 1.0
    assert f["feat__prompt__image_count"] == 1
    assert f["feat__prompt__image_megapixels"] == pytest.approx(800 / 1e6)
    assert f["feat__prompt__image_aspect"] == 2.0
    assert f["feat__prompt__image_distinct_colors"] == 2.0
    assert all(n.startswith("feat__prompt__") for n in f)


def test_stage_features_need_their_stages():
    stages = {"large_direct": {"answer": "B", "token_logprobs": [-0.5, -1.5], "first_token_entropy": 0.25}}
    f = compute_features("Pick one\nA. x\nB. y", [], stages)
    assert f["feat__large_direct__logprob_mean"] == -1.0
    assert f["feat__large_direct__logprob_min"] == -1.5
    assert f["feat__large_direct__first_token_entropy"] == 0.25
    assert f["feat__large_direct__answer_tokens"] == 2
    assert f["feat__large_direct__parsed"] == 1.0
    assert "feat__small_direct__logprob_mean" not in f
    assert "feat__large_direct+small_direct__agree" not in f


def test_agree_feature_and_explicit_names():
    stages = {
        "large_direct": {"answer": "The answer is B.", "token_logprobs": [-0.1], "first_token_entropy": 0.0},
        "small_direct": {"answer": "(B)", "token_logprobs": [-0.1], "first_token_entropy": 0.0},
    }
    q = "Pick\nA. cat\nB. dog"
    assert compute_features(q, [], stages)["feat__large_direct+small_direct__agree"] == 0.0  # letter not first
    stages["large_direct"]["answer"] = "B. dog"
    f = compute_features(q, [], stages, names=["feat__large_direct+small_direct__agree"])
    assert f == {"feat__large_direct+small_direct__agree": 1.0}
    assert set(feature_names(("large_direct",))) < set(feature_names())


@pytest.mark.parametrize(
    "a,b,question,agree",
    [("Yes.", "yes", "Is there a dog?", True), ("12", "12.0", "", False), ("1,000", "1000", "", True),
     ("The cat", "cat!", "", True), ("", "", "", False), ("no", "Yes", "Is it red?", False)],
)
def test_answers_agree(a, b, question, agree):
    assert answers_agree(a, b, question) is agree


def test_answer_parsed_and_normalize():
    assert answer_parsed("B", "Q\nA. x\nB. y")
    assert not answer_parsed("maybe", "Q\nA. x\nB. y")
    assert answer_parsed("No, it is not", "Is it red?")
    assert not answer_parsed("one two three four five six", "What is shown?")
    assert normalize_answer(" The 3.5 Cats. ") == "3.5 cats"
    assert canonical_answer("42%") == "42"
    assert math.isfinite(compute_features("q", [Image.new("L", (1, 1))])["feat__prompt__image_edge_density"])


def _reference_stats(a) -> dict:
    """The image statistics as each feature computed them on its own before they were computed together."""
    import numpy as np

    g = a.mean(axis=2)
    edges = 0.0 if min(g.shape) < 2 else (abs(g[1:, :] - g[:-1, :]).mean() + abs(g[:, 1:] - g[:, :-1]).mean()) / 2
    rg, yb = a[..., 0] - a[..., 1], 0.5 * (a[..., 0] + a[..., 1]) - a[..., 2]
    q = (a * 7.999).astype(np.int32)
    return {"gray_std": a.mean(axis=2).std(), "edge_density": edges,
            "colorfulness": math.hypot(rg.std(), yb.std()) + 0.3 * math.hypot(rg.mean(), yb.mean()),
            "distinct_colors": float(len(np.unique(q[..., 0] * 64 + q[..., 1] * 8 + q[..., 2])))}


@pytest.mark.parametrize("mode,size", [("RGB", (48, 32)), ("RGB", (640, 480)), ("RGBA", (90, 200)), ("L", (1, 7)),
                                       ("P", (33, 65)), ("RGB", (1, 1))])
def test_image_statistics_computed_together_equal_each_features_own(mode, size):
    import numpy as np

    from routedvlm.inference.features import FeatureContext

    rng = np.random.default_rng(sum(size))
    shape = (size[1], size[0], 3)
    image = Image.fromarray(rng.integers(0, 256, size=shape, dtype=np.uint8), "RGB").convert(mode)
    ctx = FeatureContext("q", [image])
    assert ctx.image_stats == [_reference_stats(a) for a in ctx.thumbs]


def test_prompt_features_reproduce_the_bundled_labels_exactly():
    """Existing labels route the same: every prompt feature of the 1,000 bundled toy-world samples, recomputed from
    the regenerated images, equals the stored column bit for bit."""
    from pathlib import Path

    import pandas as pd

    from routedvlm.data.toyworld.task import make_samples
    from routedvlm.inference.features import feature_names

    labels = pd.read_parquet(Path(__file__).resolve().parents[2] / "data" / "toyworld" / "labels.parquet")
    samples = make_samples("label", len(labels), 0)
    assert [s.sample_id for s in samples] == list(labels["sample_id"])
    names = feature_names(("prompt",))
    got = pd.DataFrame([compute_features(s.question, [s.image], {}, names) for s in samples])
    for name in names:
        assert (got[name].to_numpy() == labels[name].to_numpy()).all(), name


@pytest.mark.parametrize("mode,size", [("RGB", (640, 480)), ("RGB", (64, 64)), ("RGB", (65, 64)), ("RGB", (64, 200)),
                                       ("RGB", (1, 300)), ("RGB", (300, 1)), ("RGBA", (90, 200)), ("L", (130, 7)),
                                       ("P", (33, 65)), ("RGB", (20, 20)), ("RGB", (1921, 1079))])
def test_the_thumbnail_equals_pillows_convert_then_thumbnail(mode, size, tmp_path):
    """The features read an RGB image's thumbnail without copying it first; the pixels are Pillow's own, for images
    in memory and for a file read lazily (JPEG, whose draft mode a converted copy never had)."""
    import numpy as np

    from routedvlm.inference.features import thumbnail

    rng = np.random.default_rng(sum(size))
    image = Image.fromarray(rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8), "RGB").convert(mode)
    path = tmp_path / "x.jpg"
    image.convert("RGB").save(path)
    for im in (image, Image.open(path)):
        want = im.convert("RGB")
        want.thumbnail((64, 64))
        got = thumbnail(im)
        assert got.mode == "RGB" and got.size == want.size and got.tobytes() == want.tobytes()
    assert image.size == size  # the caller's image is not changed
