"""Generated scorer inputs: random and adversarial answers (unicode, punctuation, numbers with units, markdown
bold, refusals, answer phrases, odd whitespace) and golds, some derived from the answer so both outcomes occur.
"""
from __future__ import annotations

import random
import string

WORDS = ["yes", "no", "Yes", "No", "YES", "cat", "dog", "bird", "fish", "red", "blue", "tree", "apple", "none",
         "two", "ten", "the", "a", "an", "is", "not", "so", "thus", "therefore", "final", "result", "could be",
         "answer", "because", "maybe", "dont", "it's", "yesterday", "nobody", "Z", "E", "F"]
UNICODE = ["ß", "straße", "ﬁ", "ﬂour", "ŉ", "ΐ", "İ", "é", "Café", "naïve", "日本", "答案是", "😀", "Ⅻ", "１２",
           "\u00a0", "\u200b", "\u2028", "e\u0301", "Ω", "ǅ", "ﬀ", "ẞ", "µ", "ſ"]
NUMBERS = ["0", "1", "2", "3", "7", "10", "12", "12.5", "3.14159", "3.14", "2.45", "2.449", "0.125", "1e3",
           "1_000", "12.", ".5", "-3", "-0.0", "1,000", "12,345,678", "12%", "12.5%", "95", "100", "105", "nan",
           "inf", "$12", "12kg", "12.5kg", "3rd", "1st", "24/7", "10:30", "5.", "1.", "2.", "40."]
PUNCT = list(string.punctuation) + ["...", "**", "“", "”", "’", "。", "，", "—"]
LETTERS = ["A", "B", "C", "D", "E", "(A)", "(B)", "(C)", "(D)", "(E)", "[C]", "B.", "B,", "b", "c", "a", "**B**",
           "**b**", "*C*", "#D", "{A}", "B:", "B)", "AB", "Bb", "B1", "(b)", ":B", "Answer: C"]
PHRASES = ["The answer is", "the answer is", "The correct answer is", "answer is", "ANSWER IS", "Answer is:",
           "So the result is", "Therefore", "x =", "The final answer is", 'The answer is "7".', "I think",
           "Cannot determine the answer", "I can't process this file.", "Failed to obtain answer via API.",
           "Sorry, I can't help with images of people yet.", "I'm sorry, but without the image provided"]
SEPARATORS = [" ", " ", " ", "", "  ", "\n", "\t", ", ", ". ", "! ", " - ", "-", "/", ";", "\n\n"]
POOLS = [(WORDS, 5), (NUMBERS, 3), (LETTERS, 3), (PHRASES, 2), (PUNCT, 2), (UNICODE, 2)]


def _token(rng: random.Random) -> str:
    pool = rng.choices([p for p, _ in POOLS], weights=[w for _, w in POOLS])[0]
    token = rng.choice(pool)
    if rng.random() < 0.08:
        token = f"**{token}**"
    return token


def answer(rng: random.Random, max_tokens: int = 10) -> str:
    """A random answer of 1..max_tokens tokens, sometimes with edge whitespace or a long numbered preamble."""
    parts = [_token(rng)]
    for _ in range(rng.randint(0, max_tokens - 1)):
        parts.append(rng.choice(SEPARATORS))
        parts.append(_token(rng))
    text = "".join(parts)
    if rng.random() < 0.05:  # long reasoning: numbered steps then a verdict
        steps = " ".join(f"{i}. step {rng.choice(WORDS)}." for i in range(1, rng.randint(20, 45)))
        text = f"{steps} {text}"
    if rng.random() < 0.15:
        text = rng.choice([" ", "  ", "\n", "\t", "   "]) + text + rng.choice(["", " ", "   ", "\n"])
    return text


def mutate(rng: random.Random, text: str) -> str:
    """A near-copy of `text`: case change, one character edited, punctuation or spaces added."""
    choice = rng.randrange(7)
    if choice == 0:
        return text.upper()
    if choice == 1:
        return text.lower()
    if choice == 2 and text:
        i = rng.randrange(len(text))
        return text[:i] + text[i + 1:]
    if choice == 3 and text:
        i = rng.randrange(len(text))
        return text[:i] + rng.choice(string.ascii_letters + "ßﬁ ") + text[i:]
    if choice == 4:
        return text + rng.choice([".", "!", " .", "?", ",", "%"])
    if choice == 5:
        return "  ".join(text.split())
    return text.strip()


def golds(rng: random.Random, prediction: str, pool: list[str], n_max: int = 3) -> list[str]:
    """1..n_max golds: copies or near-copies of the prediction, or unrelated strings from `pool`."""
    out = []
    for _ in range(rng.randint(1, n_max)):
        r = rng.random()
        if r < 0.3:
            out.append(prediction.strip())
        elif r < 0.6:
            out.append(mutate(rng, prediction.strip()))
        else:
            out.append(rng.choice(pool))
    return out


def options(rng: random.Random, n_min: int = 2, n_max: int = 6) -> list[str]:
    """Distinct option texts, sometimes overlapping (one contains another) or sharing letters' names."""
    pool = ["cat", "dog", "bird", "fish", "red", "blue", "a dog", "hot dog", "3", "5", "7", "9", "12 kg",
            "yes", "no", "apple pie", "Paris", "straße", "A", "none of these", "the left one", "1,000"]
    return rng.sample(pool, rng.randint(n_min, n_max))


def option_answer(rng: random.Random, opts: list[str]) -> str:
    """An answer that names an option in one of many forms, or none."""
    letter = string.ascii_uppercase[rng.randrange(len(opts))]
    text = opts[ord(letter) - 65]
    forms = [letter, f"({letter})", f"{letter}.", f"**{letter}**", f"The answer is {letter}", f"the answer is {letter.lower()}",
             f"The correct answer is **{letter}**.", f"answer is {letter}{rng.choice(['ird', 'og', '1', ''])}",
             text, f"It is {text}.", f"The answer is {text}", f"({letter}) {text}", f"{letter}: {text}",
             f"I think {letter} because {rng.choice(opts)} is wrong and it is long enough here",
             f"The answer is a {text}", "Cannot determine the answer", f"Z {text}", f"{letter} {letter}"]
    base = rng.choice(forms)
    return base if rng.random() < 0.6 else answer(rng, 4) + rng.choice(SEPARATORS) + base
