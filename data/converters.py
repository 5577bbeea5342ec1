"""Row converters for the dataset adapters: one function per benchmark layout turns a row (a dict of
column values) into a `Sample`, reading column names from the adapter's column map.
"""
from __future__ import annotations

import re
import string

from .sample import MC_INSTRUCTION, SHORT_INSTRUCTION, Sample
from .scorers.mmmu import parse_list


# ---------------------------------------------------------------- helpers
def _is_missing(value) -> bool:
    return value is None or (isinstance(value, float) and value != value) or str(value).strip().lower() in ("", "nan", "none")


def _references(value) -> list[str]:
    value = parse_list(value)
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value if v is not None]
    return [str(value)]


def _is_number(text: str) -> bool:
    try:
        float(str(text).strip().rstrip("%").replace(",", ""))
        return True
    except ValueError:
        return False


def auto_task_type(references: list[str], options, question: str = "") -> str:
    """multiple_choice with options (or a letter gold with lettered options in the question),
    yes_no for yes/no golds, numeric for number golds, else open."""
    if options:
        return "multiple_choice"
    golds = [r.strip() for r in references if r.strip()]
    if golds and all(g.lower() in ("yes", "no") for g in golds):
        return "yes_no"
    if golds and re.fullmatch(r"[A-F]", golds[0]) and re.search(r"(^|\n)\s*A[.)]", question):
        return "multiple_choice"
    if golds and _is_number(golds[0]):
        return "numeric"
    return "open"


def _images(adapter, row: dict) -> list:
    names = adapter.columns.get("image") or ()
    images = []
    for name in (names,) if isinstance(names, str) else names:
        value = row.get(name)
        if isinstance(value, (list, tuple)):
            images.extend(v for v in value if v is not None)
        elif value is not None:
            images.append(value)
    return images


def _extras(adapter, row: dict) -> dict:
    out = {}
    for name in adapter.columns.get("extra", ()):
        if name in row:
            value = row[name]
            out[name] = None if _is_missing(value) else value
    return out


def _text(row: dict, name: str | None) -> str:
    return "" if name is None or _is_missing(row.get(name)) else str(row[name])


# ---------------------------------------------------------------- converters
def convert_open(adapter, row: dict, sample_id: str) -> Sample:
    """Question + gold answer(s) + image(s); options if the row has an option list or dict."""
    question = _text(row, adapter.column("question", row))
    refs = _references(adapter.value("answer", row))
    options = None
    raw = parse_list(adapter.value("options", row))
    if raw is not None:
        if isinstance(raw, dict):
            options = {str(k): str(v) for k, v in raw.items()}
        elif isinstance(raw, (list, tuple)) and raw:
            options = {string.ascii_uppercase[i]: str(v) for i, v in enumerate(raw)}
    task = adapter.task_type
    if "task_type" in row and not _is_missing(row["task_type"]):
        task = str(row["task_type"])
    if task == "auto":
        task = auto_task_type(refs, options, question)
    metric = str(row["metric"]) if "metric" in row and not _is_missing(row["metric"]) else adapter.metric
    return Sample(sample_id, _images(adapter, row), question, options, refs, task, adapter.name, metric,
                  _extras(adapter, row), instruction=adapter.instruction)


def convert_mmbench(adapter, row: dict, sample_id: str) -> Sample:
    """MMBench: options in columns A-D (null or "nan" when absent), optional hint, letter answer."""
    options = {k: str(row[k]) for k in "ABCDEFGH" if k in row and not _is_missing(row[k])}
    return Sample(sample_id, _images(adapter, row), _text(row, "question"), options,
                  _references(row.get("answer")), "multiple_choice", adapter.name, adapter.metric,
                  _extras(adapter, row), context=_text(row, "hint"), instruction=adapter.instruction)


def convert_indexed_choices(adapter, row: dict, sample_id: str) -> Sample:
    """ScienceQA / AI2D: an option list and the gold as an (int or string) index into it."""
    choices = parse_list(row[adapter.column("options", row)]) or []
    options = {string.ascii_uppercase[i]: str(c) for i, c in enumerate(choices)}
    answer = row.get("answer")
    try:
        refs = [string.ascii_uppercase[int(str(answer).strip())]]
    except (ValueError, IndexError):
        refs = _references(answer)
    return Sample(sample_id, _images(adapter, row), _text(row, "question"), options, refs,
                  "multiple_choice", adapter.name, adapter.metric, _extras(adapter, row),
                  context=_text(row, "hint"), instruction=adapter.instruction)


def convert_mmmu(adapter, row: dict, sample_id: str) -> Sample:
    """MMMU: options as a stringified list (`[]` for open questions), image_1..image_7, question_type."""
    choices = parse_list(row.get("options")) or []
    choices = choices if isinstance(choices, list) else []
    qtype = _text(row, "question_type") or ("multiple-choice" if choices else "open")
    question = _text(row, "question")
    refs = _references(row.get("answer"))
    extra = {"question_type": qtype}
    if qtype == "multiple-choice":
        options = {string.ascii_uppercase[i]: str(c) for i, c in enumerate(choices)}
        return Sample(sample_id, _images(adapter, row), question, options, refs, "multiple_choice",
                      adapter.name, adapter.metric, extra, instruction=MC_INSTRUCTION)
    task = "numeric" if refs and _is_number(refs[0]) else "open"
    return Sample(sample_id, _images(adapter, row), question, None, refs, task, adapter.name,
                  adapter.metric, extra, instruction=SHORT_INSTRUCTION)


def convert_mathvista(adapter, row: dict, sample_id: str) -> Sample:
    """MathVista: the prompt is the data set's own `query`; choices, answer/question types, precision."""
    choices = parse_list(row.get("choices"))
    choices = [str(c) for c in choices] if isinstance(choices, (list, tuple)) else None
    qtype = _text(row, "question_type") or ("multi_choice" if choices else "free_form")
    atype = _text(row, "answer_type") or "text"
    precision = row.get("precision")
    extra = {"question_type": qtype, "answer_type": atype,
             "precision": None if _is_missing(precision) else float(precision), "choices": choices}
    options = {string.ascii_uppercase[i]: c for i, c in enumerate(choices)} if choices else None
    if qtype == "multi_choice":
        task = "multiple_choice"
    else:
        task = "numeric" if atype in ("integer", "float") else "open"
    query = _text(row, "query") or None
    return Sample(sample_id, _images(adapter, row), _text(row, "question"), options,
                  _references(row.get("answer")), task, adapter.name, adapter.metric, extra,
                  instruction=adapter.instruction, prompt_text=query)
