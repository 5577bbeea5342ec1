"""One benchmark question as the models see it (`Sample.prompt`, through its prompt template) and as the scorer
grades it.

Images are kept as PIL images or file paths; records (`to_record`) are JSON-safe and keep only paths.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from routedvlm.errors import DatasetError, one_of
from ..inference.prompts import MC_INSTRUCTION, SHORT_INSTRUCTION, PromptTemplate, default_instruction
from .scorers import METRICS

TASK_TYPES = ("multiple_choice", "numeric", "open", "yes_no")
LMMS_EVAL = PromptTemplate.parse("lmms-eval")
__all__ = ["MC_INSTRUCTION", "SHORT_INSTRUCTION", "TASK_TYPES", "Sample", "default_instruction"]


@dataclass
class Sample:
    """A question with its images, options, gold answers and the scorer that grades it."""

    sample_id: str = field(metadata={"help": "Stable id, unique within its data set."})
    images: list = field(metadata={"help": "PIL images or image file paths, in prompt order."})
    question: str = field(metadata={"help": "The question text as the data set has it."})
    options: dict[str, str] | None = field(metadata={"help": "Letter -> option text, or None."})
    references: list[str] = field(metadata={"help": "Gold answers (option letters for multiple choice)."})
    task_type: str = field(metadata={"help": f"One of {', '.join(TASK_TYPES)}."})
    dataset: str = field(metadata={"help": "Data set name (the adapter's name for benchmarks)."})
    metric: str = field(metadata={"help": f"Scorer name, one of {', '.join(METRICS)}."})
    extra: dict = field(default_factory=dict, metadata={"help": "Per-sample fields the scorer needs."})
    context: str = field(default="", metadata={"help": "Text shown before the question (hint)."})
    instruction: str | None = field(
        default=None, metadata={"help": "Post prompt; None -> the task type's default, '' -> none."}
    )
    prompt_text: str | None = field(
        default=None, metadata={"help": "The exact prompt when the data set ships one (MathVista `query`)."}
    )
    template: PromptTemplate | None = field(
        default=None, metadata={"help": "How `prompt` is built; None -> lmms-eval (the loaders set the adapter's)."}
    )

    def __post_init__(self) -> None:
        self.sample_id = str(self.sample_id)
        if self.task_type not in TASK_TYPES:
            raise DatasetError(
                f"The `task_type` of sample {self.sample_id!r} must be one of {one_of(TASK_TYPES)}; "
                f"got {self.task_type!r}."
            )
        if self.metric not in METRICS:
            raise DatasetError(
                f"The `metric` of sample {self.sample_id!r} must be one of {one_of(METRICS)}; got {self.metric!r}."
            )
        if isinstance(self.references, str):
            self.references = [self.references]
        self.references = [str(r) for r in self.references]
        if self.options is not None:
            self.options = {str(k): str(v) for k, v in self.options.items()}
        self.images = list(self.images or [])

    @property
    def prompt(self) -> str:
        """The exact text the models are asked: the question through the template ('none': unchanged; lmms-eval:
        context, question, `A. text` option lines, post prompt)."""
        return (self.template or LMMS_EVAL).render(
            self.question, context=self.context, options=self.options, task_type=self.task_type,
            instruction=self.instruction, prompt_text=self.prompt_text)

    def score(self, prediction: str) -> float:
        """This sample's official score for a prediction, in [0, 1]."""
        from .scorers import score

        return score(self.metric, prediction, self.references, self.options, **self.extra)

    def to_record(self) -> dict[str, Any]:
        """A JSON-safe dict; path images are kept, in-memory images are dropped (their count is kept)."""
        paths = [img for img in self.images if isinstance(img, str)]
        return {
            "sample_id": self.sample_id,
            "images": paths,
            "num_images": len(self.images),
            "question": self.question,
            "options": dict(self.options) if self.options is not None else None,
            "references": list(self.references),
            "task_type": self.task_type,
            "dataset": self.dataset,
            "metric": self.metric,
            "extra": json.loads(json.dumps(self.extra, default=str)),
            "context": self.context,
            "instruction": self.instruction,
            "prompt_text": self.prompt_text,
            "prompt_template": self.template.to_dict() if self.template is not None else None,
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> "Sample":
        """Inverse of `to_record` (images come back as the recorded paths)."""
        required = ("sample_id", "question", "references", "task_type", "dataset", "metric")
        missing = [k for k in required if k not in record]
        if missing:
            raise DatasetError(
                f"A sample record needs the keys {', '.join(required)}; missing {', '.join(missing)} "
                f"(found {', '.join(sorted(record))})."
            )
        return cls(
            sample_id=record["sample_id"],
            images=list(record.get("images") or []),
            question=record["question"],
            options=record.get("options"),
            references=record["references"],
            task_type=record["task_type"],
            dataset=record["dataset"],
            metric=record["metric"],
            extra=dict(record.get("extra") or {}),
            context=record.get("context") or "",
            instruction=record.get("instruction"),
            prompt_text=record.get("prompt_text"),
            template=PromptTemplate.from_dict(record["prompt_template"]) if record.get("prompt_template") else None,
        )
