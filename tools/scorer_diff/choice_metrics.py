"""Differential runs of the scorers with options or typed answers (multiple_choice, mmmu, mathvista) against
lmms-eval 0.7.3 and, when their repositories are given, VLMEvalKit and the official MMMU / MathVista code.
"""
from __future__ import annotations

import re
import string
import types

from routedvlm.data.scorers import score
from routedvlm.data.scorers.choice import infer_choice
from routedvlm.data.scorers.mathvista import extract_answer
from routedvlm.data.scorers.mmmu import parse_choice, parse_list, parse_open

from . import cases
from .tally import classify

RANDOM = "<random letter>"
_NO_RANDOM = types.SimpleNamespace(choice=lambda seq: RANDOM)


def _answer_is_quirk(vlm, pred: str, result) -> bool:
    """VLMEvalKit's `answer is` regex fired on a letter running into a word, or on the article `a`."""
    match = vlm._VERBOSE_ANSWER_RE.search(pred)
    if not match or match.group(1).upper() != result:
        return False
    rest = pred[match.end():]
    return bool(re.match(r"\w", rest) or (match.group(1) == "a" and re.match(r"\s+\w", rest)))


def run_multiple_choice(rng, n, refs, tally):
    vlm, old = refs.vlmevalkit, refs.lmms.MMBench_Evaluator()
    for _ in range(n):
        opts = cases.options(rng) if rng.random() < 0.95 else []
        pred = cases.option_answer(rng, opts) if opts and rng.random() < 0.7 else cases.answer(rng, 8)
        choices = dict(zip(string.ascii_uppercase, opts))
        ours = infer_choice(pred, choices)
        current = None
        if vlm is not None:
            theirs = vlm.can_infer(pred, dict(choices)) or None
            rules = [("`answer is` letter running into a word or the article `a` (score_multiple_choice docstring)",
                      lambda: _answer_is_quirk(vlm, pred, theirs)),
                     ("no options: letters A-D valid (score_multiple_choice docstring)", lambda: not opts)]
            current = classify(ours, theirs, rules, pred)
            tally.add(("multiple_choice", f"VLMEvalKit can_infer @{vlm.commit[:8]}"), current,
                      f"{pred!r} {opts}: ours {ours}, ref {theirs}")
        if opts and len(opts) <= 4:  # the older copy asserts letters A-D
            theirs_old = old.can_infer(pred, dict(choices)) or None
            rules = [("lmms-eval 0.7.3 holds an older copy of VLMEvalKit's matcher; the current one (pinned) "
                      "agrees up to the documented deviations",
                      lambda: None if current is None else not current.startswith("UNDOCUMENTED"))]
            tally.add(("multiple_choice", "lmms-eval mmbench_evals.can_infer (older copy)"),
                      classify(ours, theirs_old, rules, pred), f"{pred!r} {opts}: ours {ours}, ref {theirs_old}")


def _mmmu_mc(rng, refs, tally):
    opts = cases.options(rng, 2, 5)
    pred = cases.option_answer(rng, opts) if rng.random() < 0.7 else cases.answer(rng, 8)
    index2ans = dict(zip(string.ascii_uppercase, opts))
    ours = parse_choice(pred, opts)
    refs.lmms.mmmu_mcq_module.random = _NO_RANDOM
    official = None
    if refs.mmmu is not None:
        refs.mmmu.parse_multi_choice_response.__globals__["random"] = _NO_RANDOM
        official = refs.mmmu.parse_multi_choice_response(pred, list(index2ans), index2ans)
        tally.add(("mmmu (multiple choice)", f"official MMMU eval_utils @{refs.mmmu.commit[:8]}"),
                  classify(ours, official, [("unparsed scores 0, not a random letter (mmmu module docstring)",
                                             lambda: ours is None and official == RANDOM)], pred),
                  f"{pred!r} {opts}: ours {ours}, ref {official}")
    theirs = refs.lmms.mmmu.parse_multi_choice_response(pred, list(index2ans), index2ans)
    rules = [("unparsed scores 0, not a random letter (mmmu module docstring)", lambda: ours is None and theirs == RANDOM),
             ("lmms-eval's extra `L `/`L.` letter passes, not in the official MMMU (score_mmmu docstring)",
              lambda: None if official is None else official == ours or (ours is None and official == RANDOM))]
    tally.add(("mmmu (multiple choice)", "lmms-eval mmmu parse_multi_choice_response"),
              classify(ours, theirs, rules, pred), f"{pred!r} {opts}: ours {ours}, ref {theirs}")


def _candidates(values) -> list[str]:
    return sorted({repr(v) for v in values})


def _mmmu_open(rng, refs, tally):
    pred = cases.answer(rng, 8)
    pool = cases.NUMBERS + cases.WORDS + ["['24/7', '3.43']", "['3', 'three']", "12 kg"]
    gold = rng.choice([rng.choice(pool), cases.mutate(rng, rng.choice(pool))])
    ours = score("mmmu", pred, [gold], question_type="open")
    ours_cands = _candidates(parse_open(pred))
    listed = parse_list(gold) if isinstance(parse_list(gold), list) else None
    for label, ref in (("lmms-eval mmmu utils", refs.lmms.mmmu), ("official MMMU eval_utils", refs.mmmu)):
        if ref is None:
            continue
        cands = ref.parse_open_response(pred)
        theirs = float(ref.eval_open(gold, cands))
        rules = [("stringified list gold parsed, as the official answer file holds lists (score_mmmu docstring)",
                  lambda: listed is not None and float(ref.eval_open(listed, cands)) == ours)]
        tally.add(("mmmu (open)", label), classify(ours, theirs, rules, pred), f"{pred!r} vs {gold!r}: ours {ours}, ref {theirs}")
        tally.add(("mmmu (open candidates)", label), classify(ours_cands, _candidates(cands), [], pred),
                  f"{pred!r}: ours {ours_cands}, ref {_candidates(cands)}")


def run_mmmu(rng, n, refs, tally):
    for i in range(n):
        (_mmmu_mc if i % 2 else _mmmu_open)(rng, refs, tally)


def _mathvista_case(rng) -> dict:
    qtype = rng.choice(["multi_choice", "free_form", "free_form"])
    if qtype == "multi_choice":
        choices = cases.options(rng, 2, 5)
        pred = cases.option_answer(rng, choices) if rng.random() < 0.7 else cases.answer(rng, 5)
        return dict(question_type=qtype, answer_type="text", precision=None, choices=choices,
                    answer=rng.choice(choices), pred=pred)
    atype = rng.choice(["integer", "float", "float", "list"])  # MathVista's free-form types
    precision = float(rng.randint(0, 3)) if atype == "float" else None
    pred = rng.choice([rng.choice(cases.NUMBERS), cases.answer(rng, 5), f'The answer is "{rng.choice(cases.NUMBERS)}".',
                       "[1, 2]", "[1,2]", f"{rng.choice(cases.NUMBERS)} {rng.choice(cases.NUMBERS)}"])
    answer = rng.choice(["7", "12", "2.5", "2.45", "3.14", "0.1", "[1, 2]", "1000", "-3", "12.5", "yes"])
    return dict(question_type=qtype, answer_type=atype, precision=precision, choices=None, answer=answer, pred=pred)


def run_mathvista(rng, n, refs, tally):
    evaluator, process = refs.lmms.mathvista.mathvista_evaluator, refs.lmms.mathvista.mathvista_process_results
    for _ in range(n):
        c = _mathvista_case(rng)
        pred, kw = c["pred"], {k: c[k] for k in ("question_type", "answer_type", "precision", "choices")}
        ours = score("mathvista", pred, [c["answer"]], **kw)
        stand_in = extract_answer(pred.strip(), c["question_type"], c["answer_type"], c["choices"] or [])[0]
        evaluator.get_chat_response = lambda prompt, **_: stand_in  # the LLM extractor -> routedvlm's rules
        doc = dict(kw, pid="1", query="", answer=c["answer"], metadata={}, precision=c["precision"] or 0)
        result = process(doc, [pred])["llm_as_judge_eval"]
        theirs = float(result["true_false"])
        int_doc = dict(doc, precision=int(doc["precision"]))
        rules = [("lmms-eval passes the float precision to round(), which raises; the official casts it to int "
                  "(score_mathvista docstring)", lambda: float(process(int_doc, [pred])["llm_as_judge_eval"]["true_false"]) == ours),
                 ("lmms-eval strips both sides before comparing; the official compares them as they are",
                  lambda: str(result["prediction"]).strip() == c["answer"].strip() and str(result["prediction"]) != c["answer"])]
        tally.add(("mathvista", "lmms-eval mathvista_process_results (LLM extractor = routedvlm rules)"),
                  classify(ours, theirs, rules, pred), f"{pred!r} {kw} gold {c['answer']!r}: ours {ours}, ref {theirs}")
        if refs.mathvista is not None:
            _official_mathvista(refs.mathvista, c, kw, ours, stand_in, tally)


def _official_mathvista(mv, c, kw, ours, stand_in, tally):
    pred = c["pred"]
    model = types.SimpleNamespace(get_response=lambda user_prompt: stand_in)
    problem = dict(kw, query="", pid="1", choices=c["choices"])

    def official(response):
        extraction = mv.extract_answer(model, response, problem, quick_extract=True)
        prediction = mv.normalize_extracted_answer(extraction, c["choices"], c["question_type"], c["answer_type"],
                                                   c["precision"])
        return float(mv.safe_equal(prediction, c["answer"]))

    theirs = official(pred)
    rules = [("the response is stripped first, as lmms-eval does (score_mathvista docstring)",
              lambda: official(pred.strip()) == ours)]
    tally.add(("mathvista", f"official MathVista calculate_score @{mv.commit[:8]} (LLM extractor = routedvlm rules)"),
              classify(ours, theirs, rules, pred), f"{pred!r} {kw} gold {c['answer']!r}: ours {ours}, ref {theirs}")
