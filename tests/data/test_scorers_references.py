"""Scorers vs their references: every cause the differential test (`make scorer-diff`) found, pinned here.

Expected values were computed by running the reference code itself, not re-derived:
- lmms-eval 0.7.3 (package registry): `lmms_eval/api/metrics.py`, `lmms_eval/tasks/*/utils.py`;
- open-compass/VLMEvalKit e8e78f05f3080fe28154f2130321f17951c3be94: `vlmeval/utils/matching_util.py`
  (`can_infer_option`, `can_infer_text`, `can_infer`), `vlmeval/smp/misc.py` (`process_punctuation`),
  `vlmeval/dataset/utils/yorn.py` (`YOrN_Extraction`), `vlmeval/dataset/utils/vqa_eval.py` (`process_line`);
- MMMU-Benchmark/MMMU bb0b95a945998d91dfef37e969e07d49d1139438: `mmmu/utils/eval_utils.py`;
- lupantech/MathVista 53d525874bdde205128e6b160b7357a88277d479: `evaluation/calculate_score.py`.
"""
import pytest

from routedvlm.data.scorers import extract_choice, parses, score
from routedvlm.data.scorers.choice import NO_ANSWER, infer_choice
from routedvlm.data.scorers.mmmu import extract_numbers, parse_open
from routedvlm.data.scorers.normalize import process_punctuation, vlmeval_process_punctuation

ABCD = ["cat", "dog", "bird", "fish"]
SIX = ["cat", "dog", "bird", "fish", "cow", "hen"]
STEPS = " ".join(f"{i}. step" for i in range(1, 41))  # 40 periods after digits


# ------------------------------------------------------------- anls: len(x.upper()) (lmms-eval 0.7.3 api.metrics.anls)
@pytest.mark.parametrize("pred,golds,expected", [
    ("strase", ["straße"], 1 - 1 / 7),  # "STRASSE": 7, where len() gives 6 -> 1 - 1/6
    ("ΐ", ["ι"], 1 - 1 / 3),  # "Ϊ́" is 3 code points: len() would give distance 1 / 1 -> 0
    ("ŉ", ["n"], 0.5),  # "ʼN": 2
    ("ﬁnance", ["finance"], 1 - 2 / 7),
    ("fi", ["ﬁ"], 0.0),
])
def test_anls_length_is_of_the_uppercased_strings(pred, golds, expected):
    assert score("anls", pred, golds) == pytest.approx(expected)


def test_anls_strips_the_prediction_deliberately():
    # lmms-eval measures the raw prediction: 1 - 1/7 there (documented deviation)
    assert score("anls", "helo   ", ["hello"]) == pytest.approx(0.8)
    assert score("anls", "  helo", ["hello"]) == pytest.approx(0.8)


# ------------------------------------------------------------- relaxed_accuracy: stripped as VLMEvalKit process_line
def test_relaxed_accuracy_strips_the_prediction_as_vlmevalkit():
    assert score("relaxed_accuracy", "Yes\n", ["yes"]) == 1.0  # lmms-eval chartqa passes it raw -> 0
    assert score("relaxed_accuracy", " 12.5% ", ["0.125"]) == 1.0


# ------------------------------------------------------------- mmmu open: the official `\d+\b`
@pytest.mark.parametrize("text,numbers", [
    ("x is 12kg", []), ("the 3rd one", []), ("x is 12 kg", ["12"]), ("x is 12.5kg", ["12.5"]),
    ("it weighs 12kg, so 7", ["7"]), ("1,000kg", []), ("-4 and 5", ["-4", "5"]),
])
def test_mmmu_numbers_end_in_a_word_boundary(text, numbers):
    assert extract_numbers(text) == numbers


@pytest.mark.parametrize("response,candidates", [
    ("x is 12kg", ["12kg"]), ("x is 12.5kg", [12.5, "12.5kg"]), ("the 3rd one", ["the 3rd one"]),
    ("x is 12 kg", ["12 kg", 12.0]), ("it weighs 12kg, so 7", [7.0]),
])
def test_mmmu_open_candidates_match_the_official_parser(response, candidates):
    assert sorted(map(repr, parse_open(response))) == sorted(map(repr, candidates))


def test_mmmu_12kg_is_not_the_number_12():
    assert score("mmmu", "The mass is 12kg", ["12"], question_type="open") == 0.0
    assert score("mmmu", "The mass is 12 kg", ["12"], question_type="open") == 1.0


def test_mmmu_choice_follows_the_official_not_lmms_eval_extra_passes():
    # lmms-eval 0.7.3's mmmu_mcq_utils also accepts "B " / "B." without a space before: "AB" -> B there
    assert not parses("mmmu", "AB", ABCD, question_type="multiple-choice")


# ------------------------------------------------------------- yes_no: VLMEvalKit's own process_punctuation
@pytest.mark.parametrize("text,vlmeval,vqa", [
    ("yes.", "yes", "yes"), ("there are 5. no.", "there are 5. no", "there are 5 no"),
    ("1,000 yes.", "1000 yes", "1000 yes"), ("yes.no", "yesno", "yesno"), ("it is 5.yes", "it is 5.yes", "it is 5yes"),
])
def test_vlmeval_period_rule_differs_from_vqa(text, vlmeval, vqa):
    assert vlmeval_process_punctuation(text) == vlmeval
    assert process_punctuation(text) == vqa


def test_yes_no_long_answer_ending_in_yes():
    # the VQA rule spends its 32 period deletions on "1." ... "32." and leaves "yes."
    assert process_punctuation((STEPS + " Yes.").lower()).endswith("yes.")
    assert score("yes_no", STEPS + " Yes.", ["yes"]) == 1.0
    assert parses("yes_no", STEPS + " Yes.")


@pytest.mark.parametrize("pred,parsed", [
    ("Yes.", True), ("There are 5. No.", True), ("Yes, but no cat", False), ("yes.no", False), ("It is 5.yes", False),
])
def test_yes_no_extraction_as_vlmevalkit(pred, parsed):
    assert parses("yes_no", pred) is parsed


# ------------------------------------------------------------- multiple_choice: VLMEvalKit can_infer @ e8e78f05
@pytest.mark.parametrize("pred,options,expected", [
    ("The answer is **B**", ABCD, "B"),  # bold allowed
    ("the answer is b", ABCD, "B"),  # case-insensitive
    ("ANSWER IS C", ABCD, "C"),
    ("The correct answer is **d**.", ABCD, "D"),
    # `answer is` comes before the option texts: the text alone would say A
    ("The answer is B, not a small grey cat at all here", ["a small grey cat", "a big brown dog"], "B"),
    ("E", SIX, "E"), ("(F)", SIX, "F"),  # letters past D as standalone tokens
    ("The answer is E because it is the one described in the question text", SIX, None),  # regex: A-D only
    ("B is wrong and so are most of the other options here", ABCD, None),  # letter not among the last four
    ("dog", ABCD, "B"), ("It is a dog.", ABCD, "B"), ("cat or dog", ABCD, None), ("A and B", ABCD, None),
    ("The answer is a.", ABCD, "A"), ("The answer is b because", ABCD, "B"),
])
def test_multiple_choice_matches_vlmevalkit(pred, options, expected):
    assert extract_choice(pred, options) == expected


@pytest.mark.parametrize("pred", [
    "Cannot determine the answer, but B", "I can't process this file.", "Z dog",
    "Sorry, I can't help with images of people yet.", "I'm sorry, but without the image provided, B",
])
def test_multiple_choice_refusals_are_no_answer(pred):
    assert infer_choice(pred, ABCD) == NO_ANSWER  # VLMEvalKit's "Z"
    assert extract_choice(pred, ABCD) is None
    assert not parses("multiple_choice", pred, ABCD)
    assert score("multiple_choice", pred, ["B"], ABCD) == 0.0


def test_multiple_choice_api_failure_skips_the_letters():
    assert extract_choice("Failed to obtain answer via API. B", ABCD) is None
    # ... but not the option texts (can_infer falls through to can_infer_text)
    assert extract_choice("Failed to obtain answer via API. dog", ["a cat", "the dog is sitting on the red mat"]) is None
    assert extract_choice("Failed to obtain answer via API. dog", ["dog", "the cat is sitting on the red mat"]) == "A"


@pytest.mark.parametrize("pred,expected,vlmevalkit", [
    ("The answer is bird", "C", "B"), ("answer is Bird", "C", "B"), ("The answer is a dog.", "B", "A"),
])
def test_multiple_choice_answer_is_quirk_is_not_kept(pred, expected, vlmevalkit):
    # deliberate deviation (score_multiple_choice docstring): VLMEvalKit returns `vlmevalkit` here
    assert extract_choice(pred, ABCD) == expected != vlmevalkit


# ------------------------------------------------------------- mathvista / exact_match
def test_mathvista_infinite_number_is_wrong_not_an_error():
    # int(float("inf")) raises OverflowError; the official `except Exception` turns it into None
    assert score("mathvista", "inf", ["7"], question_type="free_form", answer_type="integer") == 0.0
    assert not parses("mathvista", "inf", question_type="free_form", answer_type="integer")


def test_mathvista_float_precision_is_cast_as_the_official_does():
    # lmms-eval 0.7.3 calls round(x, 1.0), which raises, so it scores every float answer 0
    kw = dict(question_type="free_form", answer_type="float", precision=1.0)
    assert score("mathvista", "12.5", ["12.5"], **kw) == 1.0


@pytest.mark.parametrize("pred,gold,expected", [
    ("Downhill!", "downhill", 1.0), ("down-hill", "downhill", 1.0), ("red  car", "red car", 1.0),
    ("The answer is (B).", "B", 0.0), ("B.", "B", 1.0), ("(B)", "B", 1.0),
])
def test_exact_match_docstring_examples(pred, gold, expected):
    assert score("exact_match", pred, [gold]) == expected
