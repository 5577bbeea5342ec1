"""MMMU scoring: the official `eval_utils.py` answer parsing for multiple-choice and open questions.

Deliberate deviation: an unparsable multiple-choice response scores 0 and reports unparsed, where the
official code picks a random letter (a guess must not become a "correct" label).
"""
from __future__ import annotations

import ast
import re

from .choice import option_dict

_STRIP_CHARS = (",", ".", "!", "?", ";", ":", "'")
_KEY_INDICATORS = ("could be ", "so ", "is ", "thus ", "therefore ", "final ", "answer ", "result ")
_NUM_COMMAS = re.compile(r"-?\b\d{1,3}(?:,\d{3})+\b")
_NUM_SCIENTIFIC = re.compile(r"-?\d+(?:\.\d+)?[eE][+-]?\d+")
# The integer alternative ends in a word boundary, as in the official pattern: `12kg` and `3rd` yield
# no number (`12.5kg` still yields 12.5: only `\d+` carries the `\b`).
_NUM_SIMPLE = re.compile(r"-?(?:\d+\.\d+|\.\d+|\d+\b)(?![eE][+-]?\d+)(?![,\d])")
# The official code lowercases before splitting on ". " followed by a capital, so in effect only
# newlines split sentences. Reproduced as is.
_SENTENCE_SPLIT = re.compile(r"\.\s(?=[A-Z])|\n")


def is_multiple_choice(options=None, **extra) -> bool:
    """MC when `question_type` says so, else when there are options."""
    qtype = extra.get("question_type")
    if qtype:
        return str(qtype) == "multiple-choice"
    return bool(option_dict(parse_list(options)))


def parse_list(value):
    """Options/golds stored as a stringified Python list (`"['a', 'b']"`) -> list; others unchanged."""
    if isinstance(value, str) and value.strip().startswith("["):
        try:
            parsed = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            return value
        return parsed if isinstance(parsed, list) else value
    return value


def parse_choice(response: str, options) -> str | None:
    """Official `parse_multi_choice_response`, returning None instead of a random letter."""
    index2ans = option_dict(parse_list(options))
    letters = list(index2ans)
    for ch in _STRIP_CHARS:
        response = response.strip(ch)
    response = " " + response + " "
    candidates = [c for c in letters if f"({c})" in response]
    bracketed = bool(candidates)
    by_content = False
    if not candidates:
        candidates = [c for c in letters if f" {c} " in response]
    if not candidates and len(response.split()) > 5:
        candidates = [c for c, ans in index2ans.items() if ans.lower() in response.lower()]
        by_content = bool(candidates)
    if not candidates:
        return None
    if len(candidates) == 1:
        return candidates[0]
    if by_content:
        starts = [response.lower().rfind(index2ans[c].lower()) for c in candidates]
    elif bracketed:
        starts = [response.rfind(f"({c})") for c in candidates]
    else:
        starts = [response.rfind(f" {c} ") for c in candidates]
    return candidates[starts.index(max(starts))]


def _key_subresponses(response: str) -> list[str]:
    response = response.strip().strip(".").lower()
    subs = _SENTENCE_SPLIT.split(response)
    indicators = list(_KEY_INDICATORS)
    keys = []
    for index, resp in enumerate(subs):
        if index == len(subs) - 1:
            indicators.append("=")
        shortest = None
        for indicator in indicators:
            if indicator in resp:
                tail = resp.split(indicator)[-1].strip()
                if not shortest or len(tail) < len(shortest):  # as the reference: "" is replaced too
                    shortest = tail
        if shortest and shortest.strip() not in (":", ",", ".", "!", "?", ";", "'"):
            keys.append(shortest)
    return keys or [response]


def extract_numbers(text: str) -> list[str]:
    """Numbers with thousands commas, in scientific notation, and plain (official `extract_numbers`).

    `x is 12kg` yields no number (the official `\d+\b`), `x is 12 kg` yields 12.
    """
    return _NUM_COMMAS.findall(text) + _NUM_SCIENTIFIC.findall(text) + _NUM_SIMPLE.findall(text)


def normalize_str(text: str) -> list:
    """Official `normalize_str`: numbers -> [float rounded to 2]; strings lowercased, 1 char padded."""
    text = str(text).strip()
    try:
        return [round(float(text.replace(",", "")), 2)]
    except ValueError:
        pass
    text = text.lower()
    if len(text) == 1:
        return [" " + text, text + " "]
    return [text]


def parse_open(response: str) -> list:
    """Official `parse_open_response`: the normalised candidate answers of a free-text response."""
    keys = _key_subresponses(response)
    preds = list(keys)
    for key in keys:
        preds.extend(extract_numbers(key))
    out = []
    for pred in preds:
        for norm in normalize_str(pred):
            if norm not in out:
                out.append(norm)
    return out


def _golds(references) -> list:
    golds = []
    for ref in references:
        ref = parse_list(ref)
        golds.extend(ref if isinstance(ref, list) else [ref])
    return [str(g) for g in golds]


def _eval_open(golds: list[str], preds: list) -> bool:
    norm_golds = [n for g in golds for n in normalize_str(g)]
    for pred in preds:
        if isinstance(pred, str):
            if any(isinstance(g, str) and g in pred for g in norm_golds):
                return True
        elif pred in norm_golds:
            return True
    return False


def score_mmmu(prediction: str, references: list[str], options=None, **extra) -> float:
    """MMMU accuracy; matches the official MMMU `mmmu/utils/eval_utils.py` (MMMU-Benchmark/MMMU bb0b95a9).

    Multiple choice (`question_type == "multiple-choice"`, or options present): `(L)` letters, then
    letters standing alone, then (responses over 5 words) letters whose option text occurs; several
    -> the one mentioned last. Unparsed -> 0 (deviation: the official code guesses at random).
    Open: key phrases after `is `, `so `, `answer `... plus every number, normalised (numbers rounded
    to 2 decimals); correct if a number equals a gold or a string gold is a substring of a candidate.
    Golds may be stringified Python lists (the official answer file holds real lists).

    lmms-eval 0.7.3 (`tasks/_task_utils/mmmu_mcq_utils.py`) adds two looser letter passes that
    the official code does not have, `B ` and `B.` without a space before them; routedvlm follows
    the official code: `AB` with options A-D is unparsed here, B in lmms-eval.
    """
    golds = _golds(references)
    if is_multiple_choice(options, **extra):
        letter = parse_choice(str(prediction), options)
        return float(letter is not None and letter in [g.strip() for g in golds])
    return float(_eval_open(golds, parse_open(str(prediction))))


def parses_mmmu(prediction: str, options=None, **extra) -> bool:
    if is_multiple_choice(options, **extra):
        return parse_choice(str(prediction), options) is not None
    return bool(str(prediction).strip())
