"""Differential test of routedvlm.data.scorers against the reference code each scorer names, on generated cases.

    make scorer-diff                       # lmms-eval 0.7.3 only (.venv-scorers is built from the registry)
    make scorer-diff SCORER_REFS=/path     # also VLMEvalKit, MMMU and MathVista from git repos under /path

Prints, per scorer and reference, how many cases agree, how many disagreements each documented deviation
explains (rules in text_metrics.py / choice_metrics.py, each naming the docstring that documents it), and the
undocumented ones grouped by a guessed cause. Exit status 1 when any disagreement is undocumented.
"""
from __future__ import annotations

import argparse
import random
import sys
import types
from pathlib import Path

from . import choice_metrics, text_metrics
from .references import PINS, ReferenceError_, load_lmms_eval, load_upstream
from .tally import Tally

RUNNERS = {
    "anls": text_metrics.run_anls, "exact_match": text_metrics.run_exact_match,
    "mathvista": choice_metrics.run_mathvista, "mmmu": choice_metrics.run_mmmu,
    "multiple_choice": choice_metrics.run_multiple_choice, "relaxed_accuracy": text_metrics.run_relaxed_accuracy,
    "vqa_accuracy": text_metrics.run_vqa_accuracy, "yes_no": text_metrics.run_yes_no,
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tools.scorer_diff", description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=3000, help="generated cases per scorer (default 3000)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--metrics", nargs="*", default=sorted(RUNNERS), choices=sorted(RUNNERS), help="scorers to check")
    p.add_argument("--refs", default="", help="folder holding git repositories of the upstream references, "
                   "each as `owner+name` or `name` (with or without a `repo/` inside), at the pinned commits")
    return p


def _find_repo(refs: str, repository: str) -> str | None:
    if not refs:
        return None
    owner, name = repository.split("/")
    for candidate in (f"{owner}+{name}/repo", f"{owner}+{name}", name):
        if (Path(refs) / candidate).exists():
            return str(Path(refs) / candidate)
    return None


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        refs = types.SimpleNamespace(lmms=load_lmms_eval())
        for key, (repository, commit, _) in PINS.items():
            repo = _find_repo(args.refs, repository)
            setattr(refs, key, load_upstream(key, repo) if repo else None)
            print(f"{repository} @{commit[:12]}: " + ("loaded" if repo else "not given (--refs), skipped"))
    except ReferenceError_ as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"lmms-eval {refs.lmms.version}: loaded; {args.cases} cases per scorer, seed {args.seed}\n")
    tally = Tally()
    for metric in args.metrics:
        RUNNERS[metric](random.Random(f"{args.seed}:{metric}"), args.cases, refs, tally)
    print("\n".join(tally.lines()))
    undocumented, unverified = tally.undocumented(), tally.unverified()
    print(f"\n{undocumented} undocumented disagreement(s); {unverified} unverified (their rule needs a --refs repo)")
    return 1 if undocumented else 0


if __name__ == "__main__":
    sys.exit(main())
