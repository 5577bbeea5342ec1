"""Text normalisation shared by the scorers: the EvalAI/MMF VQA answer processor and Levenshtein distance.

The VQA processor reproduces the reference quirks on purpose (see `process_punctuation`), because
published TextVQA / VQAv2 / POPE numbers were computed with them.
"""
from __future__ import annotations

import re

# Contractions written without an apostrophe -> with it (the VQA evaluation table).
CONTRACTIONS = {
    "aint": "ain't", "arent": "aren't", "cant": "can't", "couldve": "could've", "couldnt": "couldn't",
    "couldn'tve": "couldn't've", "couldnt've": "couldn't've", "didnt": "didn't", "doesnt": "doesn't",
    "dont": "don't", "hadnt": "hadn't", "hadnt've": "hadn't've", "hadn'tve": "hadn't've",
    "hasnt": "hasn't", "havent": "haven't", "hed": "he'd", "hed've": "he'd've", "he'dve": "he'd've",
    "hes": "he's", "howd": "how'd", "howll": "how'll", "hows": "how's", "Id've": "I'd've",
    "I'dve": "I'd've", "Im": "I'm", "Ive": "I've", "isnt": "isn't", "itd": "it'd", "itd've": "it'd've",
    "it'dve": "it'd've", "itll": "it'll", "let's": "let's", "maam": "ma'am", "mightnt": "mightn't",
    "mightnt've": "mightn't've", "mightn'tve": "mightn't've", "mightve": "might've",
    "mustnt": "mustn't", "mustve": "must've", "neednt": "needn't", "notve": "not've",
    "oclock": "o'clock", "oughtnt": "oughtn't", "ow's'at": "'ow's'at", "'ows'at": "'ow's'at",
    "'ow'sat": "'ow's'at", "shant": "shan't", "shed've": "she'd've", "she'dve": "she'd've",
    "she's": "she's", "shouldve": "should've", "shouldnt": "shouldn't", "shouldnt've": "shouldn't've",
    "shouldn'tve": "shouldn't've", "somebody'd": "somebodyd", "somebodyd've": "somebody'd've",
    "somebody'dve": "somebody'd've", "somebodyll": "somebody'll", "somebodys": "somebody's",
    "someoned": "someone'd", "someoned've": "someone'd've", "someone'dve": "someone'd've",
    "someonell": "someone'll", "someones": "someone's", "somethingd": "something'd",
    "somethingd've": "something'd've", "something'dve": "something'd've",
    "somethingll": "something'll", "thats": "that's", "thered": "there'd", "thered've": "there'd've",
    "there'dve": "there'd've", "therere": "there're", "theres": "there's", "theyd": "they'd",
    "theyd've": "they'd've", "they'dve": "they'd've", "theyll": "they'll", "theyre": "they're",
    "theyve": "they've", "twas": "'twas", "wasnt": "wasn't", "wed've": "we'd've", "we'dve": "we'd've",
    "weve": "we've", "werent": "weren't", "whatll": "what'll", "whatre": "what're", "whats": "what's",
    "whatve": "what've", "whens": "when's", "whered": "where'd", "wheres": "where's",
    "whereve": "where've", "whod": "who'd", "whod've": "who'd've", "who'dve": "who'd've",
    "wholl": "who'll", "whos": "who's", "whove": "who've", "whyll": "why'll", "whyre": "why're",
    "whys": "why's", "wont": "won't", "wouldve": "would've", "wouldnt": "wouldn't",
    "wouldnt've": "wouldn't've", "wouldn'tve": "wouldn't've", "yall": "y'all", "yall'll": "y'all'll",
    "y'allll": "y'all'll", "yall'd've": "y'all'd've", "y'alld've": "y'all'd've",
    "y'all'dve": "y'all'd've", "youd": "you'd", "youd've": "you'd've", "you'dve": "you'd've",
    "youll": "you'll", "youre": "you're", "youve": "you've",
}
NUMBER_WORDS = {
    "none": "0", "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5",
    "six": "6", "seven": "7", "eight": "8", "nine": "9", "ten": "10",
}
ARTICLES = frozenset({"a", "an", "the"})
PUNCTUATION = (";", "/", "[", "]", '"', "{", "}", "(", ")", "=", "+", "\\", "_", "-", ">", "<", "@", "`", ",", "?", "!")
# The VQA (EvalAI/MMF) pattern is "(?!<=\d)(\.)(?!\d)": a mistyped look-behind, so in effect a period
# is removed whenever it is not followed by a digit. Kept as written.
_PERIOD_STRIP = re.compile(r"(?!<=\d)(\.)(?!\d)")
# VLMEvalKit's own copy (vlmeval/smp/misc.py) has a real look-behind: a period after a digit stays.
_VLMEVAL_PERIOD_STRIP = re.compile(r"(?<!\d)\.(?!\d)")
_COMMA_STRIP = re.compile(r"(\d)(,)(\d)")
_PERIOD_STRIP_MAX = 32  # both references pass re.UNICODE (== 32) as `count`: at most 32 periods go


def _strip_punctuation(text: str, period_strip: re.Pattern) -> str:
    out = text
    has_digit_comma = _COMMA_STRIP.search(text) is not None
    for p in PUNCTUATION:
        if (p + " " in text or " " + p in text) or has_digit_comma:
            out = out.replace(p, "")
        else:
            out = out.replace(p, " ")
    return period_strip.sub("", out, count=_PERIOD_STRIP_MAX)


def process_punctuation(text: str) -> str:
    """The VQA punctuation rule (EvalAI/MMF, as in lmms-eval's `EvalAIAnswerProcessor`), quirks included.

    For each punctuation mark: if it touches a space anywhere in the text (or the text has a
    digit,digit comma), every occurrence is deleted; otherwise every occurrence becomes a space.
    Then the first 32 periods not followed by a digit are deleted (`"5."` -> `"5"`).
    """
    return _strip_punctuation(text, _PERIOD_STRIP)


def vlmeval_process_punctuation(text: str) -> str:
    """VLMEvalKit's `process_punctuation` (vlmeval/smp/misc.py), used by its yes/no extraction.

    The same mark rule as `process_punctuation`, but only periods with no digit on EITHER side are
    deleted (first 32 of them): `"5."` stays `"5."`, and periods after digits do not use up the 32.
    """
    return _strip_punctuation(text, _VLMEVAL_PERIOD_STRIP)


def process_digit_article(text: str) -> str:
    """Lowercase, number words -> digits, drop articles, restore contractions; single-spaced."""
    words = []
    for word in text.lower().split():
        word = NUMBER_WORDS.get(word, word)
        if word not in ARTICLES:
            words.append(word)
    return " ".join(CONTRACTIONS.get(w, w) for w in words)


def vqa_normalize(answer: str) -> str:
    """The EvalAI answer processor used by lmms-eval (TextVQA) and MMF, applied to one answer."""
    item = str(answer).lower()
    item = item.replace(",", "").replace("?", "").replace("'s", " 's").strip()
    item = item.replace("\n", " ").replace("\t", " ").strip()
    item = process_punctuation(item)
    return process_digit_article(item)


def levenshtein(a: str, b: str) -> int:
    """Edit distance (insertions, deletions, substitutions of one character, each cost 1)."""
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        current = [i]
        for j, cb in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]
