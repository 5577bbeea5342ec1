"""Multiple-choice scoring (MMBench, ScienceQA-IMG, AI2D): VLMEvalKit exact matching, no LLM judge,
plus MMBench's circular aggregation over rotated copies of a question.
"""
from __future__ import annotations

import re
import string

from ...router.errors import DatasetError

ROTATION_OFFSET = 1_000_000
_SPLIT_CHARS = ".()[],:;!*#{}"
_ANSWER_IS = re.compile(r"(?i:answer is)\s*:?\s*\(?([A-Z])\b")
DEFAULT_LETTERS = ("A", "B", "C", "D")


def option_dict(options) -> dict[str, str]:
    """Options as an ordered letter -> text dict; a list of texts gets letters A, B, C, ... ."""
    if options is None:
        return {}
    if isinstance(options, dict):
        return {str(k).strip(): str(v) for k, v in options.items() if v is not None}
    return {string.ascii_uppercase[i]: str(text) for i, text in enumerate(options)}


def _infer_letter(answer: str, letters: list[str]) -> str | None:
    """VLMEvalKit `can_infer_option`: exactly one letter as a standalone token, first seen in the last four."""
    mod = answer
    for ch in _SPLIT_CHARS:
        mod = mod.replace(ch, " ")
    splits = [tok.strip() for tok in mod.split()]
    present = [letter for letter in letters if letter in splits]
    if len(present) == 1 and splits.index(present[0]) > len(splits) - 5:
        return present[0]
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


def extract_choice(prediction: str, options=None) -> str | None:
    """The option letter a free-text answer names, or None when it cannot be told.

    Order (VLMEvalKit exact matching, then one regex): a standalone letter; the unique option text
    the answer contains; `answer is <letter>`. With no options given, letters A-D are valid.
    """
    opts = option_dict(options)
    letters = list(opts) or list(DEFAULT_LETTERS)
    answer = str(prediction)
    letter = _infer_letter(answer, letters) or _infer_text(answer, opts)
    if letter is None:
        match = _ANSWER_IS.search(answer)
        if match and match.group(1) in letters:
            letter = match.group(1)
    return letter


def _gold_letter(reference: str, opts: dict[str, str]) -> str:
    ref = str(reference).strip()
    if ref in opts or not opts:
        return ref
    for letter, text in opts.items():  # a gold given as the option text
        if text.strip().lower() == ref.lower():
            return letter
    return ref


def score_multiple_choice(prediction: str, references: list[str], options=None, **extra) -> float:
    """Multiple-choice accuracy; matches VLMEvalKit's exact-matching path (`can_infer`) without a judge.

    The answer is split on `.()[],:;!*#{}` and whitespace; exactly one valid letter standing alone
    whose first position is among the last four tokens wins. Else the answer containing exactly one
    option text (and not longer than twice all options' text) picks it. Else `answer is <letter>`.
    Else unparsed -> 0 (VLMEvalKit would ask an LLM judge). Golds are letters (or option texts).
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
