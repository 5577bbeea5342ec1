"""Scorers: every example of shared notes `scorers.md`, plus edge cases from the reference implementations."""
import pytest

from routedvlm.data.scorers import METRICS, circular_accuracy, extract_choice, is_correct, parses, score
from routedvlm.data.scorers.mmmu import parse_choice, parse_open
from routedvlm.data.scorers.normalize import levenshtein, process_punctuation, vqa_normalize
from routedvlm.errors import ConfigError, DatasetError

ABCD = ["cat", "dog", "bird", "fish"]


# ------------------------------------------------------------- registry
def test_metrics_are_sorted_and_complete():
    assert METRICS == ("anls", "exact_match", "mathvista", "mmmu", "multiple_choice", "relaxed_accuracy",
                       "vqa_accuracy", "yes_no")


def test_unknown_metric_names_the_valid_ones():
    with pytest.raises(ConfigError, match=r"^The `metric` must be one of 'anls', .* or 'yes_no'; got 'bleu'"):
        score("bleu", "a", ["a"])
    with pytest.raises(ConfigError, match=r"^The `metric` must be one of"):
        parses("bleu", "a")


def test_threshold_is_configurable_and_validated():
    assert score("anls", "helo", ["hello"]) == pytest.approx(0.8)
    assert is_correct("anls", "helo", ["hello"])
    assert not is_correct("anls", "helo", ["hello"], threshold=0.9)
    assert is_correct("anls", "abcd", ["abcdefgh"])  # 0.5 >= default 0.5
    with pytest.raises(ConfigError, match=r"^The `threshold` must be a number in \[0, 1\]; got 1.5"):
        is_correct("anls", "a", ["a"], threshold=1.5)


def test_none_prediction_and_string_reference():
    assert score("exact_match", None, ["a"]) == 0.0
    assert not parses("exact_match", None)
    assert score("exact_match", "a", "a") == 1.0


@pytest.mark.parametrize("metric", METRICS)
def test_every_metric_returns_a_score_in_unit_interval(metric):
    for pred in ["", "B", "The answer is 3", "yes", "(A) cat", "12.5%", "no"]:
        value = score(metric, pred, ["3"], ABCD)
        assert 0.0 <= value <= 1.0


# ------------------------------------------------------------- relaxed_accuracy
@pytest.mark.parametrize("pred,gold,expected", [
    ("0.125", "12.5%", 1.0), ("12.5%", "12.5", 0.0), ("95", "100", 1.0), ("0.0", "0", 0.0),
    ("94.9", "100", 0.0), ("105", "100", 1.0), ("105.1", "100", 0.0),  # relative to the gold, inclusive
    (" 12 \n", "12", 1.0), ("1e3", "1000", 1.0), ("1_000", "1000", 1.0), ("12.", "12", 1.0),
    ("1,000", "1000", 0.0), ("$12", "12", 0.0), ("Yes", "yes", 1.0), ("0", "0", 1.0),
    ("-95", "-100", 1.0), ("nan", "nan", 0.0),
])
def test_relaxed_accuracy(pred, gold, expected):
    assert score("relaxed_accuracy", pred, [gold]) == expected


def test_relaxed_accuracy_any_of_several_golds():
    assert score("relaxed_accuracy", "7", ["3", "7"]) == 1.0
    assert score("relaxed_accuracy", "7", []) == 0.0


# ------------------------------------------------------------- anls
@pytest.mark.parametrize("pred,golds,expected", [
    ("helo", ["hello"], 0.8), ("he", ["hello"], 0.0), ("abcd", ["abcdefgh"], 0.5),
    ("HELLO", ["hello"], 1.0), ("  hello  world ", ["hello world"], 1.0),
    ("hello", ["xyz", "hello"], 1.0),  # best gold wins
    ("", [""], 1.0), ("", ["abc"], 0.0),
])
def test_anls(pred, golds, expected):
    assert score("anls", pred, golds) == pytest.approx(expected)


def test_anls_length_uses_raw_gold():
    # normalised strings are equal; the raw gold's extra spaces only enlarge the denominator
    assert score("anls", "a b", ["a   b"]) == 1.0
    assert score("anls", "a bx", ["a   b"]) == pytest.approx(1 - 1 / 5)


# ------------------------------------------------------------- vqa_accuracy
def test_vqa_accuracy_examples():
    assert score("vqa_accuracy", "two", ["2"] * 10) == 1.0
    assert score("vqa_accuracy", "2", ["2"] * 3 + ["3"] * 7) == pytest.approx(0.9)
    assert score("vqa_accuracy", "10:30", ["10 30"] * 10) == 0.0


@pytest.mark.parametrize("matches,expected", [(0, 0.0), (1, 0.3), (2, 0.6), (3, 0.9), (4, 1.0)])
def test_vqa_accuracy_by_number_of_matching_annotators(matches, expected):
    golds = ["yes"] * matches + ["no"] * (10 - matches)
    assert score("vqa_accuracy", "Yes", golds) == pytest.approx(expected)


@pytest.mark.parametrize("raw,normalised", [
    ("The Cat.", "cat"), ("dont", "don't"), ("It's red", "it 's red"), ("1,000", "1000"),
    ("3.5", "3.5"), ("yes!", "yes"), ("black and-white", "black and white"), ("a - b", "b"),
    ("none", "0"), ("What?", "what"), ("line\nbreak", "line break"),
])
def test_vqa_normalize(raw, normalised):
    assert vqa_normalize(raw) == normalised


def test_vqa_punctuation_quirks():
    # a mark touching a space anywhere deletes every occurrence of it; otherwise it becomes a space
    assert process_punctuation("a-b - c") == "ab  c"
    assert process_punctuation("a-b") == "a b"
    # the reference passes re.UNICODE (32) as the count: only 32 periods are removed
    assert process_punctuation("." * 40) == "." * 8


# ------------------------------------------------------------- yes_no
@pytest.mark.parametrize("pred,extracted", [
    ("Yes.", True), ("There is no dog.", True), ("Yes, but no cat", False), ("maybe", False),
    ("YES", True), ("No, there is not.", True), ("yesterday", False),
])
def test_yes_no_parsing(pred, extracted):
    assert parses("yes_no", pred) is extracted


def test_yes_no_scores():
    assert score("yes_no", "Yes.", ["yes"]) == 1.0
    assert score("yes_no", "There is no dog.", ["no"]) == 1.0
    assert score("yes_no", "There is no dog.", ["yes"]) == 0.0
    assert score("yes_no", "Yes, but no cat", ["yes"]) == 0.0
    assert score("yes_no", "yes", ["Yes"]) == 1.0


# ------------------------------------------------------------- multiple_choice
@pytest.mark.parametrize("pred,letter", [
    ("(B)", "B"), ("The answer is B", "B"), ("A cow is on the mat", None), ("B.", "B"), ("[C]", "C"),
    ("**D**", "D"), ("dog", "B"), ("It is a dog.", "B"), ("cat or dog", None),
    ("The correct answer is C because the long explanation goes on and on here", "C"),
    ("E", None), ("A and B", None), ("b", None),
])
def test_extract_choice(pred, letter):
    assert extract_choice(pred, ABCD) == letter


def test_multiple_choice_worked_example_from_the_notes():
    colours = ["red", "green", "blue", "yellow"]
    assert extract_choice("(B)", colours) == "B"
    assert extract_choice("The answer is B", colours) == "B"
    assert extract_choice("A cat is on the mat", colours) is None
    # with an option text inside the answer, VLMEvalKit's text match picks it
    assert extract_choice("A cat is on the mat", ABCD) == "A"


def test_multiple_choice_scores_and_option_forms():
    assert score("multiple_choice", "(B)", ["B"], ABCD) == 1.0
    assert score("multiple_choice", "(B)", ["B"], {"A": "cat", "B": "dog"}) == 1.0
    assert score("multiple_choice", "(B)", ["A"], ABCD) == 0.0
    assert score("multiple_choice", "A cow is on the mat", ["A"], ABCD) == 0.0
    assert not parses("multiple_choice", "A cow is on the mat", ABCD)
    assert score("multiple_choice", "B", ["dog"], ABCD) == 1.0  # gold given as option text
    assert score("multiple_choice", "B", ["B"]) == 1.0  # no options: letters A-D


def test_multiple_choice_text_longer_than_twice_the_options_is_not_matched():
    long = "dog " * 20
    assert extract_choice(long, ABCD) is None


def test_circular_accuracy_all_rotations_must_be_right():
    rows = [
        {"index": 1, "correct": True}, {"index": 1_000_001, "correct": True}, {"index": 2_000_001, "correct": True},
        {"index": 2, "correct": True}, {"index": 1_000_002, "correct": False},
        {"index": 3, "correct": False},
    ]
    assert circular_accuracy(rows) == pytest.approx(1 / 3)
    assert circular_accuracy([]) == 0.0


def test_circular_accuracy_reads_dataframes_and_named_columns():
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"sample_id": ["5", "1000005"], "correct__large_direct": [True, True]})
    assert circular_accuracy(df, correct_column="correct__large_direct") == 1.0
    with pytest.raises(DatasetError, match=r"^circular_accuracy needs a `correct` column"):
        circular_accuracy(df)
    with pytest.raises(DatasetError, match=r"^circular_accuracy needs integer MMBench indices"):
        circular_accuracy([{"index": "x", "correct": True}])


# ------------------------------------------------------------- mmmu
def test_mmmu_examples():
    assert score("mmmu", "The answer is 3.14159", ["3.14"]) == 1.0
    assert score("mmmu", "(B)", ["B"], ABCD) == 1.0
    assert score("mmmu", "(B)", ["B"], "['cat', 'dog', 'bird', 'fish']", question_type="multiple-choice") == 1.0


@pytest.mark.parametrize("response,letter", [
    ("(B)", "B"), ("B.", "B"), ("The answer is C", "C"), ("I think (A) or maybe (D)", "D"),
    ("A or B", "B"), ("the animal that barks is clearly a dog here", "B"),
    ("something unrelated", None), ("b", None),  # letters are case-sensitive
    ("B,.", None),  # the reference strips `,` then `.` one after the other, leaving "B,"
])
def test_mmmu_choice_parsing(response, letter):
    assert parse_choice(response, ABCD) == letter


def test_mmmu_unparsed_choice_scores_zero_and_flags_unparsed():
    assert score("mmmu", "no idea", ["A"], ABCD, question_type="multiple-choice") == 0.0
    assert not parses("mmmu", "no idea", ABCD, question_type="multiple-choice")
    assert parses("mmmu", "(A)", ABCD, question_type="multiple-choice")


def test_mmmu_open_questions():
    assert score("mmmu", "So the result is 12", ["12"], question_type="open") == 1.0
    assert score("mmmu", "x = 1,000", ["1000"], question_type="open") == 1.0
    assert score("mmmu", "It is a tree.", ["tree"], question_type="open") == 1.0
    assert score("mmmu", "It is a bush.", ["tree"], question_type="open") == 0.0
    assert score("mmmu", "3.149", ["3.14"], question_type="open") == 0.0  # rounds to 3.15
    assert score("mmmu", "The speed is 24/7", ["['24/7', '3.43']"], question_type="open") == 1.0
    assert score("mmmu", "Therefore 3.43", ["['24/7', '3.43']"], question_type="open") == 1.0


def test_mmmu_open_parsing_details():
    assert 3.14 in parse_open("The answer is 3.14159")
    # an empty tail is replaced by any later indicator's tail, however long (reference behaviour)
    assert "5 so is" in parse_open("thus 5 so is \nend")
    # `=` counts only in the last line; sentences split on newlines only (the reference lowercases first)
    assert parse_open("x = 4. Then y = 5") == [5.0]
    assert 4.0 not in parse_open("x = 4\ny is 5")
    # one-character golds are padded, so a lone letter inside a word does not match
    assert score("mmmu", "answer is banana", ["a"], question_type="open") == 0.0
    assert score("mmmu", "answer is a b", ["a"], question_type="open") == 1.0


# ------------------------------------------------------------- mathvista
def test_mathvista_float_with_precision():
    assert score("mathvista", "2.45", ["2.5"], question_type="free_form", answer_type="float", precision=1.0) == 1.0
    assert score("mathvista", "2.449", ["2.5"], question_type="free_form", answer_type="float", precision=1.0) == 0.0
    assert score("mathvista", "1.5", ["1.50"], question_type="free_form", answer_type="float", precision=2.0) == 0.0


def test_mathvista_integer_and_extraction():
    kw = dict(question_type="free_form", answer_type="integer", precision=None)
    assert score("mathvista", "7", ["7"], **kw) == 1.0
    assert score("mathvista", "7.0", ["7"], **kw) == 1.0
    assert score("mathvista", 'Counting them, The answer is "7".', ["7"], **kw) == 1.0
    assert score("mathvista", "There are 3 red and 7 blue, total 10", ["10"], **kw) == 1.0
    assert score("mathvista", "none", ["7"], **kw) == 0.0
    assert not parses("mathvista", "none", **kw)
    assert parses("mathvista", "about 7", **kw)


def test_mathvista_multiple_choice():
    kw = dict(question_type="multi_choice", answer_type="text", choices=["3", "5", "7", "9"])
    assert score("mathvista", "7", ["7"], **kw) == 1.0
    assert score("mathvista", "C", ["7"], **kw) == 1.0
    assert score("mathvista", "(C) 7", ["7"], **kw) == 1.0
    assert score("mathvista", "c.", ["7"], **kw) == 1.0
    assert score("mathvista", "B", ["7"], **kw) == 0.0
    # nearest choice by edit distance, as the reference does, but flagged as not parsed
    assert score("mathvista", "8", ["9"], question_type="multi_choice", answer_type="text",
                 choices=["apple", "9"]) == 1.0
    assert not parses("mathvista", "8", question_type="multi_choice", answer_type="text", choices=["apple", "9"])
    # choices may come as options (list or dict) instead of `choices`
    assert score("mathvista", "B", ["5"], {"A": "3", "B": "5"}, question_type="multi_choice", answer_type="text") == 1.0


def test_mathvista_list_answers():
    kw = dict(question_type="free_form", answer_type="list")
    assert score("mathvista", "[1, 2]", ["[1, 2]"], **kw) == 1.0
    assert score("mathvista", "[1,2]", ["[1, 2]"], **kw) == 0.0


# ------------------------------------------------------------- exact_match
@pytest.mark.parametrize("pred,gold,expected", [
    ("A.", "A", 1.0), (" Red ", "red", 1.0), ("red car", "red  car", 1.0), ("B", "A", 0.0), ("", "A", 0.0),
])
def test_exact_match(pred, gold, expected):
    assert score("exact_match", pred, [gold]) == expected


def test_levenshtein_worked_example():
    assert levenshtein("kitten", "sitting") == 3
    assert levenshtein("", "abc") == 3
