"""Multiple-choice scoring (MMBench, ScienceQA-IMG, AI2D): VLMEvalKit exact matching, no LLM judge,
plus MMBench's circular aggregation over rotated copies of a question.
"""
from __future__ import annotations

import re
import string

from routedvlm.errors import DatasetError

ROTATION_OFFSET = 1_000_000
_SPLIT_CHARS = ".()[],:;!*#{}"
# VLMEvalKit `_VERBOSE_ANSWER_RE` plus a look-ahead: the letter must not run on into a word.
_ANSWER_IS = re.compile(r"(?i)(?:correct\s+)?answer\s+is\s+\**([ABCD])\**(?!\w)")
_ARTICLE = re.compile(r"\s+\w")  # what follows a lowercase `a` that is the article, not option A
API_FAILURE = "Failed to obtain answer via API"
REFUSALS = (
    "Sorry, I can't help with images of people yet.", "I can't process this file.",
    "I'm sorry, but without the image provided", "Cannot determine the answer",
)
NO_ANSWER = "Z"  # VLMEvalKit's letter for "the model gave no answer"
DEFAULT_LETTERS = ("A", "B", "C", "D")


def option_dict(options) -> dict[str, str]:
    """Options as an ordered letter -> text dict; a list of texts gets letters A, B, C, ... ."""
    if options is None:
        return {}
    if isinstance(options, dict):
        return {str(k).strip(): str(v) for k, v in options.items() if v is not None}
    return {string.ascii_uppercase[i]: str(text) for i, text in enumerate(options)}


def _infer_option(answer: str, letters: list[str]) -> str | None:
    """VLMEvalKit `can_infer_option`: a letter, NO_ANSWER, or None (then the option texts are tried)."""
    if API_FAILURE in answer:
        return None
    if any(refusal in answer for refusal in REFUSALS):
        return NO_ANSWER
    mod = answer
    for ch in _SPLIT_CHARS:
        mod = mod.replace(ch, " ")
    splits = [tok.strip() for tok in mod.split()]
    present = [letter for letter in letters if letter in splits]
    if len(present) == 1:
        if splits.index(present[0]) > len(splits) - 5:
            return present[0]
    elif not present and NO_ANSWER in splits:
        return NO_ANSWER
    letter = _answer_is(answer)
    return letter if letter in letters else None


def _answer_is(answer: str) -> str | None:
    """The letter of the first `answer is <A-D>` that names a letter (not `a` used as an article)."""
    for match in _ANSWER_IS.finditer(answer):
        if match.group(1) == "a" and _ARTICLE.match(answer, match.end()):
            continue
        return match.group(1).upper()
    return None


def _infer_text(answer: str, options: dict[str, str]) -> str | None:
    """VLMEvalKit `can_infer_text`: the answer contains exactly one option's text (case-insensitive)."""
    if not options:
        return None
    answer = answer.lower()
    if len(answer) > 2 * sum(len(text) for text in options.values()):
        return None
    cands = [letter for letter, text in options.items() if text.lower() in answer]
    return cands[0] if len(cands) == 1 else None


def infer_choice(prediction: str, options=None) -> str | None:
    """VLMEvalKit `can_infer` without a judge: a valid letter, NO_ANSWER (a refusal), or None."""
    opts = option_dict(options)
    letters = list(opts) or list(DEFAULT_LETTERS)
    answer = str(prediction)
    return _infer_option(answer, letters) or _infer_text(answer, opts)


def extract_choice(prediction: str, options=None) -> str | None:
    """The option letter a free-text answer names, or None when it names none (or refuses).

    Order as VLMEvalKit's `can_infer` at open-compass/VLMEvalKit e8e78f05: API-failure text skips
    to the option texts; a refusal string is no answer; exactly one valid letter standing alone
    among the last four tokens; a lone `Z` token (no valid letter) is no answer; `answer is
    <A-D>`; the unique option text the answer contains. With no options, letters A-D are valid.
    """
    opts = option_dict(options)
    letter = infer_choice(prediction, opts)
    return letter if letter in (list(opts) or DEFAULT_LETTERS) else None


def _gold_letter(reference: str, opts: dict[str, str]) -> str:
    ref = str(reference).strip()
    if ref in opts or not opts:
        return ref
    for letter, text in opts.items():  # a gold given as the option text
        if text.strip().lower() == ref.lower():
            return letter
    return ref


def score_multiple_choice(prediction: str, references: list[str], options=None, **extra) -> float:
    """Multiple-choice accuracy; matches VLMEvalKit's exact matching (`can_infer`, no LLM judge).

    Reference: open-compass/VLMEvalKit e8e78f05, vlmeval/utils/matching_util.py. In order:
    1. an answer containing `Failed to obtain answer via API` skips to step 5;
    2. a refusal (`Cannot determine the answer`, `I can't process this file.`, ...) is no answer -> 0;
    3. split on `.()[],:;!*#{}` and whitespace: exactly one valid letter standing alone (any of the
       options' letters, E and beyond included) whose first position is among the last four tokens
       wins; with no valid letter, a lone `Z` token is no answer -> 0;
    4. `(correct) answer is <A-D>`, case-insensitive, `**bold**` allowed (`The answer is **b**` -> B;
       letters past D never match here: `the answer is E, because ...` goes on to step 5);
    5. the answer (lowercased, not longer than twice all options' text) contains exactly one option text.
    Else unparsed -> 0 (VLMEvalKit would ask an LLM judge, or score "Z" under exact matching).

    Deliberate deviations: in step 4 the letter must not run on into a word, and a lowercase `a`
    followed by a word is the article: VLMEvalKit reads `The answer is bird` as B and `The answer
    is a dog` as A; here both go on to the option texts (bird -> C, dog -> B with options cat, dog,
    bird, fish). `The answer is a.` and `the answer is b because` still give A and B. With no options given, letters A-D are valid (VLMEvalKit would match
    nothing). Golds are letters (or option texts).
    """
    opts = option_dict(options)
    letter = extract_choice(prediction, opts)
    if letter is None:
        return 0.0
    return float(any(_gold_letter(ref, opts) == letter for ref in references))


def parses_multiple_choice(prediction: str, options=None, **extra) -> bool:
    return extract_choice(prediction, options) is not None


def _rows(df_or_records) -> list[dict]:
    if hasattr(df_or_records, "to_dict"):
        return df_or_records.to_dict("records")
    return list(df_or_records)


def circular_accuracy(df_or_records, *, index_column: str = "index", correct_column: str = "correct") -> float:
    """MMBench circular accuracy: a question counts only if it and all its rotated copies are right.

    Rows with index >= 1,000,000 are rotations of question `index % 1,000,000`. `index_column`
    falls back to `sample_id` when absent; `correct_column` holds bools (or scores, >= 0.5 is right).
    Returns the fraction of questions right in every rotation (0.0 for no rows).
    """
    groups: dict[int, bool] = {}
    for row in _rows(df_or_records):
        raw = row.get(index_column, row.get("sample_id"))
        if correct_column not in row:
            raise DatasetError(
                f"circular_accuracy needs a `{correct_column}` column; found {sorted(row)}. "
                "Pass correct_column= (e.g. 'correct__large_direct')."
            )
        try:
            index = int(str(raw).strip())
        except ValueError:
            raise DatasetError(
                f"circular_accuracy needs integer MMBench indices in `{index_column}`; got {raw!r}."
            ) from None
        ok = row[correct_column]
        ok = bool(ok >= 0.5) if isinstance(ok, float) else bool(ok)
        key = index % ROTATION_OFFSET
        groups[key] = groups.get(key, True) and ok
    return sum(groups.values()) / len(groups) if groups else 0.0
