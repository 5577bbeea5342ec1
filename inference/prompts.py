"""The prompt texts around a question: the data set's prompt template, and what the pipeline adds.

`PromptTemplate` turns a data set's question into the text the models are asked. `none` (the default for local
data and the toy world) sends the question exactly as given; `lmms-eval` (the default for the known benchmarks)
adds lmms-eval's post prompts (hint, `A. text` option lines, "Answer the question using a single word or phrase."
or the multiple-choice instruction); any text with `{question}` (and optionally `{context}`, `{options}`) is a
custom template. The labeller records the template in the labels' metadata, train-router copies it into the
router's policy, and RoutedVLM / `routedvlm serve` apply it to every request's question.

`PromptConfig`: direct answers add nothing (thinking is switched off through the chat template). Reasoning on a
model without a thinking mode appends `reason_suffix` and reads the answer after `answer_marker`. A transfer
appends the kept reasoning with `hint_template` to the question inside the user turn, so the large model's
image+question prefix is shared by `large_direct` and every `transfer_<K>` (two-stage decoding).
"""
from __future__ import annotations

import re
import string
from dataclasses import asdict, dataclass, field

from routedvlm.errors import ConfigError

MC_INSTRUCTION = "Answer with the option's letter from the given choices directly."
SHORT_INSTRUCTION = "Answer the question using a single word or phrase."
TEMPLATE_NAMES = ("custom", "lmms-eval", "none")
PLACEHOLDERS = ("context", "options", "question")
# a question that lists lettered options ("A. ...", "B) ...") gets the multiple-choice post prompt at run time
_OPTION_LINES = re.compile(r"(?:^|\n)\s*\(?A[.)]\s.*\n\s*\(?B[.)]\s", re.DOTALL)


def default_instruction(task_type: str) -> str:
    """The lmms-eval style post prompt for a task type."""
    return MC_INSTRUCTION if task_type == "multiple_choice" else SHORT_INSTRUCTION


def _format_problems(text: str) -> list[str]:
    try:
        parsed = [(f, spec, conv) for _, f, spec, conv in string.Formatter().parse(text) if f is not None]
    except ValueError as exc:
        return [f"it is not a valid format string ({exc}); write literal braces as '{{{{' and '}}}}'"]
    names = {f for f, _, _ in parsed}
    out = [] if "question" in names else ["it must contain the placeholder {question}"]
    if any(spec or conv for _, spec, conv in parsed):  # `{question:>999999999}` would allocate gigabytes
        out.append("a placeholder carries a conversion or format spec ('!r', ':>80'); write plain {question}")
    unknown = sorted(names - set(PLACEHOLDERS))
    if unknown:
        out.append(f"unknown placeholder(s) {unknown}; the placeholders are {{{'}, {'.join(PLACEHOLDERS)}}}")
    return out


@dataclass(frozen=True)
class PromptTemplate:
    """How a data set's question becomes the prompt text, at labelling and at run time (see the module docstring)."""

    name: str = field(default="none", metadata={"help": "'none', 'lmms-eval' or 'custom'"})
    text: str | None = field(default=None, metadata={"help": "custom: format string with {question}[, {context}, {options}]"})
    instructions: dict | None = field(default=None, metadata={
        "help": "lmms-eval: the post prompt of 'multiple_choice' and of 'open' questions, as resolved for the data set"})

    def __post_init__(self):
        if self.name not in TEMPLATE_NAMES:
            raise ConfigError(f"The prompt template `name` must be one of {', '.join(TEMPLATE_NAMES)}. Got {self.name!r}.")
        if self.name == "custom":
            problems = _format_problems(self.text) if isinstance(self.text, str) else ["it must be a string"]
            if problems:
                raise ConfigError(f"The custom prompt template {self.text!r} is invalid: {'; '.join(problems)}. "
                                  "Example: '{question}\\nAnswer in one word.'")

    @classmethod
    def parse(cls, value, *, instruction: str | None = None) -> "PromptTemplate":
        """A template from a name ('none', 'lmms-eval'), a format string with {question}, a dict (`to_dict`) or a
        template. `instruction`: the data set's own lmms-eval post prompt (None: by task type)."""
        if isinstance(value, PromptTemplate):
            return value
        if value is None or value == "none":
            return cls("none")
        if isinstance(value, dict):
            return cls.from_dict(value)
        if value == "lmms-eval":
            mc, other = (instruction, instruction) if instruction is not None else (MC_INSTRUCTION, SHORT_INSTRUCTION)
            return cls("lmms-eval", instructions={"multiple_choice": mc, "open": other})
        if isinstance(value, str) and "{" in value:
            return cls("custom", text=value)
        raise ConfigError(f"The `prompt_template` must be 'none', 'lmms-eval' or a format string containing "
                          f"{{question}} (e.g. '{{question}}\\nAnswer in one word.'). Got {value!r} instead.")

    # ---- labelling: a data set sample -> prompt ----
    def render(self, question: str, *, context: str = "", options: dict | None = None, task_type: str = "open",
               instruction: str | None = None, prompt_text: str | None = None) -> str:
        """The prompt of one sample. lmms-eval: the data set's own prompt (`prompt_text`, MathVista `query`) if any,
        else context, question, option lines and the post prompt (`instruction`, None: the task type's)."""
        lines = "\n".join(f"{k}. {v}" for k, v in (options or {}).items())
        if self.name == "none":
            return question
        if self.name == "custom":
            return self.text.format(question=question, context=context, options=lines)
        if prompt_text is not None:
            return prompt_text
        post = default_instruction(task_type) if instruction is None else instruction
        parts = [p for p in (context.strip(), question.strip(), lines, post) if p]
        return "\n".join(parts)

    # ---- run time: a user's question -> prompt ----
    def apply(self, question: str) -> str:
        """The prompt RoutedVLM sends for a user's question: 'none' leaves it as is; a custom template fills
        {question} ({context} and {options} empty: the user's question carries them); lmms-eval appends the
        multiple-choice post prompt when the question lists lettered options (`A. ...` and `B. ...` lines), else
        the open one."""
        if self.name == "none":
            return question
        if self.name == "custom":
            return self.text.format(question=question, context="", options="")
        inst = self.instructions or {}
        post = inst.get("multiple_choice" if _OPTION_LINES.search(question) else "open", "")
        return f"{question}\n{post}" if post else question

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "PromptTemplate":
        if not isinstance(data, dict) or set(data) - {"name", "text", "instructions"}:
            raise ConfigError(f"A recorded prompt template must be a dict with keys name, text, instructions. Got {data!r}.")
        return cls(data.get("name", "none"), data.get("text"), data.get("instructions"))


@dataclass(frozen=True)
class PromptConfig:
    """Texts added to the user's question. Defaults suit instruction-tuned Qwen3-VL-class models."""

    reason_suffix: str = "\nThink step by step, then give the final answer after 'Answer:'."
    answer_marker: str = "Answer:"
    hint_template: str = "\nDraft reasoning: {reasoning}"

    def transfer_question(self, question: str, reasoning: str) -> str:
        """The question the large model sees in a transfer: question + kept reasoning."""
        return question + self.hint_template.format(reasoning=reasoning)

    def reason_question(self, question: str) -> str:
        """The question a model without a thinking mode sees when asked to reason."""
        return question + self.reason_suffix

    def to_dict(self) -> dict:
        return asdict(self)


DEFAULT_PROMPTS = PromptConfig()
