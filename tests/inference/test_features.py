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
