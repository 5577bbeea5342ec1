"""MathVista scoring: the official `calculate_score.py` normalisation with deterministic answer
extraction (the official pipeline extracts with an LLM; routedvlm uses its rule-based quick path
plus a last-number rule for numeric answers).
"""
from __future__ import annotations

import re

from .choice import option_dict
from .mmmu import parse_list
from .normalize import levenshtein

_ANSWER_QUOTED = re.compile(r'The answer is "(.*)"\.')
_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?|-?\.\d+")


def _choices(options, extra: dict) -> list[str]:
    choices = extra.get("choices")
    if choices is not None:
        choices = parse_list(choices)
        return [str(c) for c in choices] if isinstance(choices, (list, tuple)) else []
    return list(option_dict(options).values())


def extract_answer(response: str, question_type: str, answer_type: str, choices: list[str]) -> tuple[str, bool]:
    """(extraction, found): the official quick extraction, then the last number for numeric types.

    `found` is False when nothing matched and the raw response is passed on (for multiple choice
    it then goes to the nearest-choice rule, which is a guess).
    """
    response = str(response).strip()
    if not response:
        return "", False
    if question_type == "multi_choice" and response in choices:
        return response, True
    if answer_type == "integer":
        try:
            return str(int(response)), True
        except ValueError:
            pass
    if answer_type == "float":
        try:
            return str(float(response)), True
        except ValueError:
            pass
    match = _ANSWER_QUOTED.search(response)
    if match:
        return match.group(1), True
    if question_type == "multi_choice":
        if re.search(r"\(([a-zA-Z])\)", response):
            return response, True
        bare = response.rstrip(".").strip()
        if len(bare) == 1 and bare.isalpha():  # "b." -> "B": the cleanup an LLM extractor would do
            return bare.upper(), True
    elif answer_type in ("integer", "float"):
        numbers = _NUMBER.findall(response)
        if numbers:
            return numbers[-1].replace(",", ""), True
    return response, False


def normalize_extracted(extraction: str, question_type: str, answer_type: str, choices: list[str], precision) -> str | None:
    """Official `normalize_extracted_answer`: letters -> choice text, nearest choice, int/float/list forms."""
    if question_type == "multi_choice":
        extraction = str(extraction).strip()
        letters = re.findall(r"\(([a-zA-Z])\)", extraction)
        if letters:
            extraction = letters[0].upper()
        option_letters = [chr(ord("A") + i) for i in range(len(choices))]
        if extraction in option_letters:
            return choices[option_letters.index(extraction)]
        if not choices:
            return None
        distances = [levenshtein(extraction, choice) for choice in choices]
        return choices[distances.index(min(distances))]
    try:
        if answer_type == "integer":
            return str(int(float(extraction)))
        if answer_type == "float":
            return str(round(float(extraction), int(float(precision))))
        if answer_type == "list":
            return str(extraction)
    except (TypeError, ValueError, OverflowError):  # the reference catches every Exception (`inf` -> int)
        return None
    return str(extraction)


def _fields(options, extra: dict) -> tuple[str, str, list[str]]:
    choices = _choices(options, extra)
    qtype = extra.get("question_type") or ("multi_choice" if choices else "free_form")
    atype = extra.get("answer_type") or "text"
    return str(qtype), str(atype), choices


def score_mathvista(prediction: str, references: list[str], options=None, **extra) -> float:
    """MathVista accuracy; matches the official `calculate_score.py` (normalise, then string equality).

    Extraction is deterministic: the response when it equals a choice or parses as the answer type;
    else `The answer is "…".`; else (numeric types) the last number. Multiple choice: `(x)` -> letter,
    a bare letter -> that choice's text, else the choice with the smallest edit distance (as the
    reference does). integer -> `str(int(float(x)))`; float -> `str(round(float(x), int(precision)))`;
    list -> `str(x)`. extra: question_type, answer_type, precision, choices (or pass `options`).

    Reference: lupantech/MathVista 53d52587 `evaluation/calculate_score.py` (compared exactly, no strip).
    As lmms-eval does, the response is stripped first (the official script takes it raw). lmms-eval
    0.7.3 itself passes the float precision to round() uncast, which raises, so it scores every float
    answer 0 (`2.45` with precision 1.0 vs `2.5`: 1 here and in the official script, 0 in lmms-eval).
    """
    qtype, atype, choices = _fields(options, extra)
    extraction, _ = extract_answer(prediction, qtype, atype, choices)
    if qtype != "multi_choice" and not extraction:
        return 0.0
    normalized = normalize_extracted(extraction, qtype, atype, choices, extra.get("precision"))
    if normalized is None:
        return 0.0
    return float(any(normalized == str(ref) for ref in references))


def parses_mathvista(prediction: str, options=None, **extra) -> bool:
    """True when the deterministic extraction found an answer (not the nearest-choice guess)."""
    qtype, atype, choices = _fields(options, extra)
    extraction, found = extract_answer(prediction, qtype, atype, choices)
    if not found:
        return False
    return normalize_extracted(extraction, qtype, atype, choices, extra.get("precision")) is not None
