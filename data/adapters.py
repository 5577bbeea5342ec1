"""Dataset adapters: per benchmark its hub ids, column map, metric, task type, default prompt template and row
converter (`converters.py`); the known benchmarks default to lmms-eval's post prompts, local data to none. `resolve_adapter` finds the adapter for a hub id or, from its columns, for
a local data set. Loading itself is in `loading.py`.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from routedvlm.errors import ConfigError, DatasetError, one_of
from .converters import convert_indexed_choices, convert_mathvista, convert_mmbench, convert_mmmu, convert_open
from .sample import MC_INSTRUCTION, SHORT_INSTRUCTION, Sample

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
    instruction: str | None = field(default=None, metadata={"help": "lmms-eval post prompt; None -> task default."})
    prompt_template: str = field(default="lmms-eval", metadata={
        "help": "Default prompt template: 'lmms-eval' (known benchmarks) or 'none' (the question as given)."})

    def template(self, name=None):
        """The PromptTemplate `name` ('none', 'lmms-eval', a format string; None: this adapter's default)."""
        from ..inference.prompts import PromptTemplate

        return PromptTemplate.parse(self.prompt_template if name is None else name, instruction=self.instruction)

    def missing_columns(self, columns) -> list[str]:
        """Required column groups with no member in `columns`, rendered `a` or `a|b`."""
        present = set(columns)
        return ["|".join(group) for group in self.required if not present.intersection(group)]

    def column(self, role: str, row) -> str | None:
        """The first column configured for `role` that the row (or list of column names) has."""
        names = self.columns.get(role) or ()
        for name in (names,) if isinstance(names, str) else names:
            if name in row:
                return name
        return None

    def value(self, role: str, row: dict):
        """The first non-null value among the columns configured for `role` (None if all are null)."""
        names = self.columns.get(role) or ()
        for name in (names,) if isinstance(names, str) else names:
            if row.get(name) is not None:
                return row[name]
        return None


# ---------------------------------------------------------------- table
_ADAPTER_LIST = [
    Adapter("local", "exact_match", "auto",
            {"id": ("sample_id", "id", "question_id"), "question": "question", "answer": ("answers", "answer"),
             "image": ("images", "image"), "options": ("options", "choices")},
            (("question",), ("answer", "answers"), ("image", "images")), convert_open, default_split="train",
            prompt_template="none"),
    Adapter("chartqa", "relaxed_accuracy", "auto",
            {"question": "question", "answer": "answer", "image": "image", "extra": ("type",)},
            (("question",), ("answer",), ("type",), ("image",)), convert_open,
            hub_names=("ChartQA",), instruction=SHORT_INSTRUCTION),
    Adapter("chartqa_m4", "relaxed_accuracy", "auto",
            {"question": "query", "answer": "label", "image": "image"},
            (("query",), ("label",), ("image",)), convert_open,
            hub_ids=("HuggingFaceM4/ChartQA",), instruction=SHORT_INSTRUCTION),
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
    # the embedded toy world (data/toyworld/task.py `write_dataset`): the question alone, exactly as the toy
    # models were trained on it (no post prompt); detected by its `difficulty` and `reasoning` columns
    Adapter("toyworld", "exact_match", "numeric",
            {"id": "sample_id", "question": "question", "answer": "answer", "image": "image", "extra": ("difficulty",)},
            (("sample_id",), ("question",), ("answer",), ("image",), ("difficulty",), ("reasoning",)), convert_open,
            default_split="train", instruction="", prompt_template="none"),
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
