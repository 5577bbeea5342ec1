"""Answer-text helpers shared by the runtime and the labeller: normalisation, agreement, parsing.

These are metric-agnostic (the runtime does not know a sample's benchmark); the official scorers
live in `routedvlm.data.scorers`.
"""
from __future__ import annotations

import re

_OPTION_LINE = re.compile(r"^\s*\(?([A-Z])[.):]\s+\S", re.MULTILINE)
_LETTER = re.compile(r"^\(?([A-Z])\)?(?:[.:)]|\s*$|\s)")
_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?%?")
_YES_NO_START = re.compile(
    r"^\s*(is|are|was|were|does|do|did|can|could|has|have|will|would|should)\b", re.IGNORECASE
)
_ARTICLES = {"a", "an", "the"}


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation (keeping decimal points), articles and surrounding space.

    >>> normalize_answer(" The Cat. ") == normalize_answer("cat") == "cat"
    True
    """
    t = (text or "").strip().lower()
    t = re.sub(r"(?<=\d),(?=\d{3}\b)", "", t)
    t = re.sub(r"(?<!\d)\.|\.(?!\d)", " ", t)
    t = re.sub(r"[^\w\s.%-]", " ", t)
    words = [w for w in t.split() if w not in _ARTICLES]
    return " ".join(words)


def option_letters(question: str) -> list[str]:
    """Letters of the option lines (`A. text`, `(B) text`) in a prompt, in order."""
    return _OPTION_LINE.findall(question or "")


def extract_option_letter(answer: str, letters: list[str]) -> str | None:
    """The option letter an answer names (`B`, `(B)`, `B. cat`), or None."""
    m = _LETTER.match((answer or "").strip())
    if m and m.group(1) in letters:
        return m.group(1)
    return None


def is_yes_no_question(question: str) -> bool:
    return bool(_YES_NO_START.match(question or "")) and not option_letters(question)


def canonical_answer(answer: str, question: str = "") -> str:
    """A comparable form: the option letter for multiple choice, yes/no, a number, else normalised text."""
    letters = option_letters(question)
    if letters:
        letter = extract_option_letter(answer, letters)
        if letter:
            return letter.lower()
    norm = normalize_answer(answer)
    words = norm.split()
    if words and words[0] in ("yes", "no"):
        return words[0]
    nums = _NUMBER.findall(norm)
    if len(nums) == 1 and len(words) <= 3:
        return nums[0].replace(",", "").rstrip("%")
    return norm


def answers_agree(a: str, b: str, question: str = "") -> bool:
    """Mutual verification's test: do two answers say the same after canonicalisation?"""
    ca, cb = canonical_answer(a, question), canonical_answer(b, question)
    return bool(ca) and ca == cb


def answer_parsed(answer: str, question: str = "") -> bool:
    """Whether a short answer has the expected shape: an option letter for multiple choice,
    yes/no for yes/no questions, else a non-empty answer of at most five words."""
    letters = option_letters(question)
    if letters:
        return extract_option_letter(answer, letters) is not None
    norm = normalize_answer(answer)
    if is_yes_no_question(question):
        return norm.split()[:1] in (["yes"], ["no"])
    return 0 < len(norm.split()) <= 5
