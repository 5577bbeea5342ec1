"""Scorers for free-text answers: relaxed_accuracy (ChartQA), anls (DocVQA, InfographicVQA),
vqa_accuracy (TextVQA, VQAv2), yes_no (POPE) and exact_match (RealWorldQA, fallback).

Each `score_*` takes (prediction, references, options, **extra) and returns a float in [0, 1];
each `parses_*` says whether the prediction yielded an answer at all.
"""
from __future__ import annotations

import string

from .normalize import levenshtein, vlmeval_process_punctuation, vqa_normalize

ANLS_THRESHOLD = 0.5
RELAXED_TOLERANCE = 0.05


def _to_float(text: str) -> float | None:
    """pix2struct's `_to_float`: `12.5%` -> 0.125; Python `float` rules otherwise; None on failure."""
    try:
        if text.endswith("%"):
            return float(text.rstrip("%")) / 100.0
        return float(text)
    except ValueError:
        return None


def _relaxed_one(prediction: str, target: str) -> bool:
    pred_f, target_f = _to_float(prediction), _to_float(target)
    if pred_f is not None and target_f:
        return abs(pred_f - target_f) / abs(target_f) <= RELAXED_TOLERANCE
    return prediction.lower() == target.lower()


def score_relaxed_accuracy(prediction: str, references: list[str], options=None, **extra) -> float:
    """ChartQA relaxed accuracy; matches pix2struct `relaxed_correctness` as used by lmms-eval and VLMEvalKit.

    The prediction is stripped (the gold is not), as VLMEvalKit's `process_line` does; lmms-eval
    0.7.3's `chartqa_process_results` passes it raw, so `Yes\n` vs `yes` is 1 here and 0 there. When both sides parse as floats and the gold is
    non-zero, the relative error to the GOLD must be <= 5 % (inclusive); otherwise a case-insensitive
    exact string match. Several golds: 1 if any matches. Like the reference, `nan`/`inf` golds never
    match numerically and a gold of 0 falls back to string matching (`0.0` vs `0` -> 0).
    """
    pred = str(prediction).strip()
    return float(any(_relaxed_one(pred, str(ref)) for ref in references))


def parses_relaxed_accuracy(prediction: str, options=None, **extra) -> bool:
    return bool(str(prediction).strip())


def score_anls(prediction: str, references: list[str], options=None, **extra) -> float:
    """Average Normalized Levenshtein Similarity for one question; matches lmms-eval 0.7.3 `api.metrics.anls`.

    Both sides are stripped, lowercased and whitespace-collapsed for the distance; the length is
    max(len(gold.upper()), len(prediction.upper())) of the un-normalised strings, `.upper()` as in
    the reference (it lengthens ß, ligatures such as ﬁ and a few Greek letters: `strase` vs
    [`straße`] is 1 - 1/7 = 0.857, where len() would give 1 - 1/6 = 0.833). Score = 1 - min over golds of distance /
    length, set to 0 below 0.5 (exactly 0.5 is kept). No golds -> 0.

    Deliberate deviation: the prediction is stripped before its length is taken (routedvlm strips
    every answer); lmms-eval measures the raw prediction, so `helo   ` (three trailing spaces) vs
    [`hello`] is 0.8 here and 1 - 1/7 = 0.857 there.
    """
    pred = str(prediction).strip()
    pred_norm = " ".join(pred.lower().split())
    values = []
    for ref in references:
        ref = str(ref)
        ref_norm = " ".join(ref.strip().lower().split())
        length = max(len(ref.upper()), len(pred.upper()))
        values.append(0.0 if length == 0 else levenshtein(ref_norm, pred_norm) / length)
    if not values:
        return 0.0
    result = 1.0 - min(values)
    return 0.0 if result < ANLS_THRESHOLD else result


def parses_anls(prediction: str, options=None, **extra) -> bool:
    return bool(str(prediction).strip())


def score_vqa_accuracy(prediction: str, references: list[str], options=None, **extra) -> float:
    """VQA accuracy; matches lmms-eval's TextVQA scorer (EvalAI answer processor from MMF).

    The prediction and every gold are normalised (`vqa_normalize`); the score is the mean over each
    gold i of min(1, #(other golds equal to the prediction) / 3). With the usual 10 golds, 3 matching
    annotators give 0.9 and 4 or more give 1. No golds -> 0.
    """
    pred = vqa_normalize(prediction)
    golds = [vqa_normalize(ref) for ref in references]
    if not golds:
        return 0.0
    accs = []
    for i in range(len(golds)):
        matching = sum(1 for j, gold in enumerate(golds) if j != i and gold == pred)
        accs.append(min(1.0, matching / 3.0))
    return sum(accs) / len(accs)


def parses_vqa_accuracy(prediction: str, options=None, **extra) -> bool:
    return bool(vqa_normalize(prediction))


def extract_yes_no(prediction: str) -> str | None:
    """VLMEvalKit `YOrN_Extraction`: "yes", "no", or None when both or neither word occurs."""
    words = vlmeval_process_punctuation(str(prediction).lower()).split()
    has_yes, has_no = "yes" in words, "no" in words
    if has_yes and not has_no:
        return "yes"
    if has_no and not has_yes:
        return "no"
    return None


def score_yes_no(prediction: str, references: list[str], options=None, **extra) -> float:
    """POPE-style yes/no accuracy; matches VLMEvalKit's yes/no extraction (no LLM judge).

    The prediction is lowercased, passed through VLMEvalKit's own `process_punctuation` (not the
    VQA one: a period is deleted only with no digit on either side, first 32 only) and split into
    words: `yes` without `no` -> yes, the reverse -> no, otherwise unknown, which scores 0. So an
    answer with 40 numbered steps `1.` ... `40.` ending in `Yes.` is yes here, where the VQA rule
    spends its 32 deletions on the step numbers and leaves `yes.`. Golds are compared lowercased
    and stripped (VLMEvalKit compares `Yes`/`No` exactly; POPE golds are lowercase words).
    """
    answer = extract_yes_no(prediction)
    if answer is None:
        return 0.0
    return float(any(str(ref).strip().lower() == answer for ref in references))


def parses_yes_no(prediction: str, options=None, **extra) -> bool:
    return extract_yes_no(prediction) is not None


_PUNCT_TABLE = str.maketrans("", "", string.punctuation)


def normalize_exact(text: str) -> str:
    """Strip, lowercase, delete ASCII punctuation, collapse whitespace."""
    return " ".join(str(text).strip().lower().translate(_PUNCT_TABLE).split())


def score_exact_match(prediction: str, references: list[str], options=None, **extra) -> float:
    """Exact match after stripping, lowercasing, deleting ASCII punctuation and collapsing whitespace.

    The generic fallback (routedvlm's own rule, shared notes `scorers.md`), also used for RealWorldQA.
    It is more lenient than lmms-eval 0.7.3's RealWorldQA scorer (`tasks/realworldqa/utils.py`,
    `realworldqa_process_results`), whose open answers must satisfy
    `pred.lower().strip().rstrip(".") == gold.strip().lower()`: `Downhill!` or `down-hill` vs
    `downhill` and `red  car` vs `red car` match here, not there. That scorer extracts a letter
    with `extract_mcq_answer` when the gold is A-D (`The answer is (B).` -> B); exact_match does
    not (it is 0 here unless the answer is the bare letter, `B.` or `(B)`). Several golds: any.
    """
    pred = normalize_exact(prediction)
    return float(any(pred == normalize_exact(ref) for ref in references))


def parses_exact_match(prediction: str, options=None, **extra) -> bool:
    return bool(normalize_exact(prediction))
