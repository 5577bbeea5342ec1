"""Differential runs of the free-text scorers (relaxed_accuracy, anls, vqa_accuracy, yes_no, exact_match)
against lmms-eval 0.7.3 and, for yes_no, VLMEvalKit. Each documented rule names the docstring it comes from.
"""
from __future__ import annotations

from routedvlm.data.scorers import score
from routedvlm.data.scorers.text import extract_yes_no

from . import cases
from .tally import classify


def run_relaxed_accuracy(rng, n, refs, tally):
    rc = refs.lmms.relaxed_correctness
    for _ in range(n):
        pred = rng.choice(cases.NUMBERS) if rng.random() < 0.5 else cases.answer(rng, 3)
        if rng.random() < 0.2:
            pred = rng.choice([" ", "\n", ""]) + pred + rng.choice([" ", "\n", ""])
        golds = cases.golds(rng, pred, cases.NUMBERS)
        ours = score("relaxed_accuracy", pred, golds)
        theirs = float(any(rc(pred, g) for g in golds))
        rules = [("prediction stripped first (score_relaxed_accuracy docstring)",
                  lambda: float(any(rc(pred.strip(), g) for g in golds)) == ours)]
        tally.add(("relaxed_accuracy", "lmms-eval chartqa.relaxed_correctness"),
                  classify(ours, theirs, rules, pred), f"{pred!r} vs {golds!r}: ours {ours}, ref {theirs}")


def run_anls(rng, n, refs, tally):
    anls = refs.lmms.anls
    pool = cases.WORDS + cases.UNICODE + ["hello", "hello world", "straße", "ﬁnance", "ΐος", "ŉ-test"]
    for _ in range(n):
        pred = cases.answer(rng, 3) if rng.random() < 0.5 else rng.choice(pool)
        if rng.random() < 0.3:
            pred = cases.mutate(rng, pred) + rng.choice(["", " ", "   ", "\n"])
        golds = cases.golds(rng, pred, pool)
        ours = score("anls", pred, golds)
        theirs = anls(golds, [pred])["anls"]
        rules = [("prediction stripped before its length is taken (score_anls docstring)",
                  lambda: abs(anls(golds, [pred.strip()])["anls"] - ours) < 1e-9)]
        tally.add(("anls", "lmms-eval api.metrics.anls"), classify(ours, theirs, rules, pred),
                  f"{pred!r} vs {golds!r}: ours {ours:.4f}, ref {theirs:.4f}")


def run_vqa_accuracy(rng, n, refs, tally):
    process = refs.lmms.textvqa_process_results
    for _ in range(n):
        pred = cases.answer(rng, 4)
        golds = [rng.choice([pred, cases.mutate(rng, pred), rng.choice(cases.WORDS + cases.NUMBERS)])
                 for _ in range(rng.choice([1, 3, 10, 10]))]
        ours = score("vqa_accuracy", pred, golds)
        theirs = process({"answers": list(golds), "question_id": 0}, [pred])["exact_match"]
        tally.add(("vqa_accuracy", "lmms-eval textvqa_process_results"), classify(ours, theirs, [], pred),
                  f"{pred!r} vs {golds!r}: ours {ours:.3f}, ref {theirs:.3f}")


def _yes_no_answer(rng) -> str:
    text = cases.answer(rng, 8)
    if rng.random() < 0.4:
        text += rng.choice([" Yes.", " No.", " yes", ", no.", " 5.", " Yes!", " (yes)"])
    return text


def run_yes_no(rng, n, refs, tally):
    pope, vlm = refs.lmms.pope_process_results, refs.vlmevalkit
    for _ in range(n):
        pred = _yes_no_answer(rng)
        ours = extract_yes_no(pred)
        if vlm is not None:
            theirs = {"Yes": "yes", "No": "no", "Unknown": None}[vlm.YOrN_Extraction(pred)]
            tally.add(("yes_no", f"VLMEvalKit YOrN_Extraction @{vlm.commit[:8]}"),
                      classify(ours, theirs, [], pred), f"{pred!r}: ours {ours}, ref {theirs}")
        gold = rng.choice(["yes", "no"])
        ours_score = score("yes_no", pred, [gold])
        theirs_score = pope({"answer": gold, "question_id": 0}, [pred])["pope_accuracy"]["score"]
        rules = [("lmms-eval's POPE task needs the whole answer to be yes/no; routedvlm extracts the word "
                  "as VLMEvalKit does (score_yes_no docstring)", lambda: pred.lower().strip() not in ("yes", "no"))]
        tally.add(("yes_no", "lmms-eval pope_process_results"), classify(ours_score, theirs_score, rules, pred),
                  f"{pred!r} vs {gold!r}: ours {ours_score}, ref {theirs_score}")


def run_exact_match(rng, n, refs, tally):
    process = refs.lmms.realworldqa_process_results
    pool = cases.WORDS + cases.NUMBERS + ["A", "B", "C", "D", "Downhill", "red car", "u.s.a", "don't"]
    for _ in range(n):
        pred = cases.answer(rng, 3) if rng.random() < 0.4 else cases.mutate(rng, rng.choice(pool))
        gold = rng.choice([rng.choice(pool), cases.mutate(rng, pred.strip())])
        if not gold.strip():
            continue
        ours = score("exact_match", pred, [gold])
        theirs = process({"answer": gold}, [pred])["exact_match"]
        rules = [
            ("letter gold: lmms-eval's RealWorldQA extracts a letter with extract_mcq_answer (score_exact_match "
             "docstring)", lambda: gold.strip().upper() in ("A", "B", "C", "D")),
            ("exact_match deletes all ASCII punctuation and collapses whitespace; lmms-eval's RealWorldQA only "
             "strips trailing periods (score_exact_match docstring)", lambda: ours == 1.0 and theirs == 0.0),
        ]
        tally.add(("exact_match", "lmms-eval realworldqa_process_results"), classify(ours, theirs, rules, pred),
                  f"{pred!r} vs {gold!r}: ours {ours}, ref {theirs}")
