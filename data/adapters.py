"""Dataset adapters: for each benchmark, its hub ids, column map, metric, task type and prompt format,
and the function that turns one row into a `Sample`. `resolve_adapter` finds the adapter for a hub id
or (from its columns) a local data set. Loading itself is in `loading.py`.
"""
from __future__ import annotations

import logging
import re
import string
from dataclasses import dataclass, field
from typing import Any, Callable

from ..router.errors import ConfigError, DatasetError, one_of
from .sample import MC_INSTRUCTION, SHORT_INSTRUCTION, Sample
from .scorers.mmmu import parse_list

log = logging.getLogger(__name__)
LMMS_ORGS = ("lmms-lab", "lmms-lab-encoder")


@dataclass(frozen=True)
class Adapter:
    """How one data set's rows become samples."""

    name: str = field(metadata={"help": "Adapter name; also the samples' `dataset`."})
    metric: str = field(metadata={"help": "Scorer name (routedvlm.data.scorers.METRICS)."})
    task_type: str = field(metadata={"help": "Task type, or 'auto' to decide per sample from the golds."})
    columns: dict = field(metadata={"help": "Role -> column name (id, question, answer, image, ...)."})
    required: tuple = field(metadata={"help": "Column groups that must exist; one name per group suffices."})
    convert: Callable = field(repr=False, metadata={"help": "convert(adapter, row, sample_id) -> Sample."})
    hub_names: tuple = field(default=(), metadata={"help": "Names under lmms-lab/ and lmms-lab-encoder/."})
    hub_ids: tuple = field(default=(), metadata={"help": "Other full hub ids (owner/name)."})
    configs: tuple = field(default=(), metadata={"help": "Hub configs this adapter serves (empty: any)."})
    default_config: str | None = None
    default_split: str = "test"
    instruction: str | None = field(default=None, metadata={"help": "Post prompt; None -> task default."})

    def missing_columns(self, columns) -> list[str]:
        """Required column groups with no member in `columns`, rendered `a` or `a|b`."""
        present = set(columns)
        return ["|".join(group) for group in self.required if not present.intersection(group)]

    def column(self, role: str, row: dict) -> str | None:
        """The first column configured for `role` that the row has."""
        names = self.columns.get(role) or ()
        for name in (names,) if isinstance(names, str) else names:
            if name in row:
                return name
        return None


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


def _images(adapter: Adapter, row: dict) -> list:
    names = adapter.columns.get("image") or ()
    images = []
    for name in (names,) if isinstance(names, str) else names:
        value = row.get(name)
        if isinstance(value, (list, tuple)):
            images.extend(v for v in value if v is not None)
        elif value is not None:
            images.append(value)
    return images


def _extras(adapter: Adapter, row: dict) -> dict:
    out = {}
    for name in adapter.columns.get("extra", ()):
        if name in row:
            value = row[name]
            out[name] = None if _is_missing(value) else value
    return out


def _text(row: dict, name: str | None) -> str:
    return "" if name is None or _is_missing(row.get(name)) else str(row[name])


# ---------------------------------------------------------------- converters
def convert_open(adapter: Adapter, row: dict, sample_id: str) -> Sample:
    """Question + gold answer(s) + image(s); options if the row has an option list or dict."""
    question = _text(row, adapter.column("question", row))
    refs = _references(row.get(adapter.column("answer", row)))
    options = None
    options_col = adapter.column("options", row)
    if options_col and not _is_missing(row.get(options_col)):
        raw = parse_list(row[options_col])
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


def convert_mmbench(adapter: Adapter, row: dict, sample_id: str) -> Sample:
    """MMBench: options in columns A-D (null or "nan" when absent), optional hint, letter answer."""
    options = {k: str(row[k]) for k in "ABCDEFGH" if k in row and not _is_missing(row[k])}
    return Sample(sample_id, _images(adapter, row), _text(row, "question"), options,
                  _references(row.get("answer")), "multiple_choice", adapter.name, adapter.metric,
                  _extras(adapter, row), context=_text(row, "hint"), instruction=adapter.instruction)


def convert_indexed_choices(adapter: Adapter, row: dict, sample_id: str) -> Sample:
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


def convert_mmmu(adapter: Adapter, row: dict, sample_id: str) -> Sample:
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


def convert_mathvista(adapter: Adapter, row: dict, sample_id: str) -> Sample:
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


# ---------------------------------------------------------------- table
_SHORT_WORD = "Answer the question with a single word."
_ADAPTER_LIST = [
    Adapter("local", "exact_match", "auto",
            {"id": ("sample_id", "id", "question_id"), "question": "question", "answer": ("answers", "answer"),
             "image": ("images", "image"), "options": ("options", "choices")},
            (("question",), ("answer", "answers"), ("image", "images")), convert_open, default_split="train"),
    Adapter("chartqa", "relaxed_accuracy", "auto",
            {"question": "question", "answer": "answer", "image": "image", "extra": ("type",)},
            (("question",), ("answer",), ("type",), ("image",)), convert_open,
            hub_names=("ChartQA",), instruction=_SHORT_WORD),
    Adapter("chartqa_m4", "relaxed_accuracy", "auto",
            {"question": "query", "answer": "label", "image": "image"},
            (("query",), ("label",), ("image",)), convert_open,
            hub_ids=("HuggingFaceM4/ChartQA",), instruction=_SHORT_WORD),
    Adapter("docvqa", "anls", "open",
            {"id": "questionId", "question": "question", "answer": "answers", "image": "image"},
            (("questionId",), ("question",), ("answers",), ("image",)), convert_open,
            hub_names=("DocVQA",), configs=("DocVQA",), default_config="DocVQA", default_split="validation"),
    Adapter("infovqa", "anls", "open",
            {"id": "questionId", "question": "question", "answer": "answers", "image": "image"},
            (("questionId",), ("question",), ("answers",), ("image",)), convert_open,
            hub_names=("DocVQA",), configs=("InfographicVQA",), default_config="InfographicVQA",
            default_split="validation"),
    Adapter("textvqa", "vqa_accuracy", "open",
            {"id": "question_id", "question": "question", "answer": "answers", "image": "image"},
            (("question_id",), ("question",), ("answers",), ("image",)), convert_open,
            hub_names=("textvqa",), default_split="validation"),
    Adapter("mmmu", "mmmu", "auto",
            {"id": "id", "image": tuple(f"image_{i}" for i in range(1, 8))},
            (("id",), ("question",), ("options",), ("answer",), ("question_type",), ("image_1",)), convert_mmmu,
            hub_names=("MMMU",), default_split="validation"),
    Adapter("mmbench", "multiple_choice", "multiple_choice",
            {"id": "index", "image": "image", "extra": ("category",)},
            (("index",), ("question",), ("A",), ("B",), ("answer",), ("image",)), convert_mmbench,
            hub_names=("MMBench", "MMBench_EN"), default_config="en", default_split="dev",
            instruction=MC_INSTRUCTION),
    Adapter("pope", "yes_no", "yes_no",
            {"id": "question_id", "question": "question", "answer": "answer", "image": "image",
             "extra": ("category",)},
            (("question_id",), ("question",), ("answer",), ("category",), ("image",)), convert_open,
            hub_names=("POPE",), instruction=SHORT_INSTRUCTION),
    Adapter("scienceqa", "multiple_choice", "multiple_choice",
            {"options": "choices", "image": "image"},
            (("question",), ("choices",), ("answer",), ("hint",), ("image",)), convert_indexed_choices,
            hub_names=("ScienceQA",), configs=("ScienceQA-IMG",), default_config="ScienceQA-IMG",
            instruction=MC_INSTRUCTION),
    Adapter("ai2d", "multiple_choice", "multiple_choice",
            {"options": "options", "image": "image"},
            (("question",), ("options",), ("answer",), ("image",)), convert_indexed_choices,
            hub_names=("ai2d",), instruction=MC_INSTRUCTION),
    Adapter("mathvista", "mathvista", "auto",
            {"id": "pid", "image": "decoded_image"},
            (("pid",), ("question",), ("decoded_image",), ("choices",), ("answer",), ("question_type",),
             ("answer_type",), ("query",)), convert_mathvista,
            hub_names=("MathVista",), hub_ids=("AI4Math/MathVista",), default_split="testmini", instruction=""),
    Adapter("realworldqa", "exact_match", "auto",
            {"question": "question", "answer": "answer", "image": "image"},
            (("question",), ("answer",), ("image",)), convert_open,
            hub_names=("RealWorldQA",), hub_ids=("xai-org/RealworldQA",), instruction=""),
]
ADAPTERS: dict[str, Adapter] = {a.name: a for a in _ADAPTER_LIST}


def _hub_candidates(dataset_id: str) -> list[Adapter]:
    owner, _, name = dataset_id.strip().strip("/").partition("/")
    found = []
    for adapter in _ADAPTER_LIST:
        if owner.lower() in LMMS_ORGS and name.lower() in (n.lower() for n in adapter.hub_names):
            found.append(adapter)
        elif dataset_id.strip().lower() in (h.lower() for h in adapter.hub_ids):
            found.append(adapter)
    return found


def known_hub_ids() -> list[str]:
    """Every hub id an adapter answers to (both lmms-lab orgs)."""
    ids = {f"{org}/{n}" for a in _ADAPTER_LIST for n in a.hub_names for org in LMMS_ORGS}
    return sorted(ids | {h for a in _ADAPTER_LIST for h in a.hub_ids})


def get_adapter(name: str) -> Adapter:
    if name not in ADAPTERS:
        raise ConfigError(f"The `adapter` must be one of {one_of(ADAPTERS)}; got {name!r}.")
    return ADAPTERS[name]


def detect_adapter(columns) -> Adapter:
    """The most specific adapter whose required columns are all present (ties: table order, `local` first)."""
    matches = [a for a in _ADAPTER_LIST if not a.missing_columns(columns)]
    if not matches:
        raise DatasetError(
            f"No adapter fits a data set with the columns {sorted(columns)}. The generic `local` adapter "
            "needs `question`, `answer` or `answers`, and `image` or `images`; pass adapter= one of "
            f"{one_of(ADAPTERS)} or rename the columns."
        )
    best = max(matches, key=lambda a: len(a.required))  # max keeps the first of equals
    log.info("Detected adapter %r from columns %s", best.name, sorted(columns))
    return best


def resolve_adapter(dataset_id_or_path: str, adapter: str | None = None, *, config: str | None = None,
                    columns=None) -> Adapter:
    """The adapter for a hub id (`lmms-lab/X`, `lmms-lab-encoder/X`, ...) or a local data set.

    `adapter=` names it explicitly. Hub ids served by several adapters (lmms-lab/DocVQA) pick by
    `config`. Local data sets are detected from `columns` (their column names).
    """
    if adapter is not None:
        return get_adapter(adapter)
    candidates = _hub_candidates(str(dataset_id_or_path))
    if candidates:
        if config is not None:
            for cand in candidates:
                if config in cand.configs:
                    return cand
        return candidates[0]
    if columns is not None:
        return detect_adapter(columns)
    raise DatasetError(
        f"Unknown data set {dataset_id_or_path!r}: it is not a local path and no adapter serves that hub id. "
        f"Known hub ids: {', '.join(known_hub_ids())}. For other data pass adapter= one of {one_of(ADAPTERS)}."
    )


def row_to_sample(adapter: Adapter, row: dict[str, Any], sample_id: str) -> Sample:
    return adapter.convert(adapter, row, sample_id)
