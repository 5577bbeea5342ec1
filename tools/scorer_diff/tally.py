"""Tally of one differential run: per (metric, reference) the cases that agree, the disagreements each
documented rule explains, and the undocumented ones grouped by a guessed cause, with examples.
"""
from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field

AGREE = "agree"
UNVERIFIED = "unverified"

_CAUSES = [
    ("refusal / API-failure text", lambda t: re.search(r"Cannot determine|can't|Failed to obtain|Sorry", t)),
    ("markdown bold", lambda t: "**" in t),
    ("non-ASCII text", lambda t: any(ord(c) > 127 for c in t)),
    ("number with a unit", lambda t: re.search(r"\d[A-Za-z]", t)),
    ("edge or odd whitespace", lambda t: t != t.strip() or "\n" in t or "\t" in t or "  " in t),
    ("punctuation", lambda t: re.search(r"[^\w\s]", t)),
]


def guess_cause(text: str) -> str:
    for name, test in _CAUSES:
        if test(text):
            return name
    return "other"


def same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        try:
            return math.isclose(float(a), float(b), abs_tol=1e-9)
        except (TypeError, ValueError):
            return False
    return a == b


@dataclass
class Tally:
    counts: dict = field(default_factory=lambda: defaultdict(Counter))
    examples: dict = field(default_factory=lambda: defaultdict(list))

    def add(self, key: tuple[str, str], outcome: str, example: str) -> None:
        self.counts[key][outcome] += 1
        if outcome != AGREE and len(self.examples[key, outcome]) < 3:
            self.examples[key, outcome].append(example if len(example) <= 240 else example[:200] + " ... " + example[-35:])

    def undocumented(self) -> int:
        return sum(n for c in self.counts.values() for o, n in c.items() if o.startswith("UNDOCUMENTED"))

    def unverified(self) -> int:
        return sum(c[UNVERIFIED] for c in self.counts.values())

    def lines(self) -> list[str]:
        out = []
        for key in sorted(self.counts):
            counts = self.counts[key]
            total = sum(counts.values())
            out.append(f"{key[0]} vs {key[1]}: {total} cases, {counts[AGREE]} agree")
            for outcome, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
                if outcome == AGREE:
                    continue
                out.append(f"    {n:6d}  {outcome}")
                out.extend(f"              e.g. {ex}" for ex in self.examples[key, outcome])
        return out


def classify(ours, theirs, rules, context: str) -> str:
    """AGREE, the name of the first documented rule that explains the disagreement, or UNDOCUMENTED."""
    if same(ours, theirs):
        return AGREE
    for name, explains in rules:
        verdict = explains()
        if verdict is None:
            return UNVERIFIED
        if verdict:
            return f"documented: {name}"
    return f"UNDOCUMENTED ({guess_cause(context)})"
