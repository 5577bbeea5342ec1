"""The reference scorers, loaded as their own code: lmms-eval 0.7.3's task utilities from the dev venv, and
(when their git repositories are given) VLMEvalKit's, MMMU's and MathVista's functions at the pinned commits.

lmms-eval is imported from its installed files; only package `__init__`s and imports the scoring functions
never call (the task registry, torch, LLM-judge clients, sacrebleu) are replaced by stubs. Upstream files are
read with `git show COMMIT:PATH`; the named functions (and module constants they use) are executed from that
source, nothing else. None of their code is copied into this repository.
"""
from __future__ import annotations

import ast
import copy
import importlib.metadata
import importlib.util
import logging
import os
import random
import re
import string
import subprocess
import sys
import types
from pathlib import Path

LMMS_EVAL_VERSION = "0.7.3"
# name -> (repository, commit, {path: [top-level names to load]})
PINS = {
    "vlmevalkit": ("open-compass/VLMEvalKit", "e8e78f05f3080fe28154f2130321f17951c3be94", {
        "vlmeval/utils/matching_util.py": ["_VERBOSE_ANSWER_RE", "can_infer_option", "can_infer_text", "can_infer"],
        "vlmeval/smp/misc.py": ["process_punctuation"],
        "vlmeval/dataset/utils/yorn.py": ["YOrN_Extraction"],
    }),
    "mmmu": ("MMMU-Benchmark/MMMU", "bb0b95a945998d91dfef37e969e07d49d1139438", {
        "mmmu/utils/eval_utils.py": ["parse_multi_choice_response", "check_is_number", "normalize_str",
                                     "extract_numbers", "parse_open_response", "eval_multi_choice", "eval_open"],
    }),
    "mathvista": ("lupantech/MathVista", "53d525874bdde205128e6b160b7357a88277d479", {
        "evaluation/extract_answer.py": ["create_test_prompt", "extract_answer"],
        "evaluation/calculate_score.py": ["get_most_similar", "normalize_extracted_answer", "safe_equal"],
    }),
}


class ReferenceError_(RuntimeError):
    """A reference could not be loaded (wrong venv, missing commit)."""


def _stub(name: str, **attrs) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    sys.modules[name] = module
    return module


def _decorator_factory(*args, **kwargs):
    return lambda fn: fn


def load_lmms_eval() -> types.SimpleNamespace:
    """The lmms-eval 0.7.3 scoring functions, imported from the installed package."""
    try:
        version = importlib.metadata.version("lmms_eval")
    except importlib.metadata.PackageNotFoundError:
        raise ReferenceError_("lmms-eval is not installed here; run `make scorer-diff` (it builds .venv-scorers).") from None
    if version != LMMS_EVAL_VERSION:
        raise ReferenceError_(f"lmms-eval {LMMS_EVAL_VERSION} is the pinned reference; found {version}.")
    root = Path(importlib.util.find_spec("lmms_eval").origin).parent
    _stub("lmms_eval.tasks", __path__=[str(root / "tasks")])  # skip the task registry (torch, datasets)
    _stub("lmms_eval.api.registry", register_metric=_decorator_factory, register_aggregation=_decorator_factory)
    _stub("sacrebleu")  # BLEU metrics only
    _stub("lmms_eval.verifiers", VerificationPipeline=object)  # MMMU's LLM-verified reasoning variant only
    _stub("lmms_eval.verifiers.openai", OpenAIVerifier=object)
    _stub("lmms_eval.llm_judge", Request=dict, ServerConfig=lambda **kw: kw, get_server=lambda **kw: None)
    _stub("lmms_eval.filters", __path__=[])  # RealWorldQA's regex filters, not its process_results
    _stub("lmms_eval.filters.extraction", ExtendedRegexFilter=object)
    _stub("lmms_eval.filters.transformation", MapFilter=object)
    from loguru import logger

    logger.remove()  # lmms-eval's MMBench matcher logs every "A might be a quantifier" at INFO
    from lmms_eval.api import metrics
    from lmms_eval.tasks._task_utils import mcq_extract, mmmu_mcq_utils, vqa_eval_metric
    from lmms_eval.tasks.chartqa import utils as chartqa
    from lmms_eval.tasks.mathvista import utils as mathvista
    from lmms_eval.tasks.mmbench import mmbench_evals
    from lmms_eval.tasks.mmmu import utils as mmmu
    from lmms_eval.tasks.pope import utils as pope
    from lmms_eval.tasks.realworldqa import utils as realworldqa
    from lmms_eval.tasks.textvqa import utils as textvqa

    return types.SimpleNamespace(
        version=version, anls=metrics.anls, relaxed_correctness=chartqa.relaxed_correctness,
        textvqa_process_results=textvqa.textvqa_process_results, EvalAIAnswerProcessor=vqa_eval_metric.EvalAIAnswerProcessor,
        mmmu=mmmu, mmmu_mcq_module=mmmu_mcq_utils, mathvista=mathvista, MMBench_Evaluator=mmbench_evals.MMBench_Evaluator,
        pope_process_results=pope.pope_process_results, realworldqa_process_results=realworldqa.realworldqa_process_results,
        extract_mcq_answer=mcq_extract.extract_mcq_answer,
    )


def git_show(repo: str, commit: str, path: str) -> str:
    """`path` at `commit` of the git repository (bare or a checkout) at `repo`."""
    git_dir = Path(repo) / ".git" if (Path(repo) / ".git").exists() else Path(repo)
    result = subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{commit}:{path}"],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise ReferenceError_(f"cannot read {path} at {commit[:12]} from {repo}: {result.stderr.strip()} "
                              "(fetch that commit first)")
    return result.stdout


def _base_namespace() -> dict:
    import numpy as np
    try:
        from Levenshtein import distance
    except ImportError:
        distance = None
    return {"re": re, "os": os, "cp": copy, "string": string, "random": random, "np": np, "logging": logging,
            "logger": logging.getLogger("reference"), "distance": distance, "Dict": dict, "demo_prompt": ""}


def load_upstream(name: str, repo: str) -> types.SimpleNamespace:
    """The pinned functions of PINS[name], executed from their source at the pinned commit."""
    _, commit, files = PINS[name]
    namespace = _base_namespace()
    for path, names in files.items():
        tree = ast.parse(git_show(repo, commit, path))
        wanted = [node for node in tree.body if _defined_name(node) in names]
        missing = set(names) - {_defined_name(node) for node in wanted}
        if missing:
            raise ReferenceError_(f"{path} at {commit[:12]} defines none of {sorted(missing)}")
        exec(compile(ast.Module(body=wanted, type_ignores=[]), f"{name}:{path}", "exec"), namespace)
    os.environ.pop("VERBOSE", None)  # VLMEvalKit's can_infer_option changes behaviour when VERBOSE is set
    return types.SimpleNamespace(commit=commit, **namespace)


def _defined_name(node) -> str | None:
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        return node.name
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    return None
