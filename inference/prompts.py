"""The prompt texts the pipeline adds around a question, as one recorded setting.

Direct answers add nothing (the data set's own answer-format instruction is part of the question;
thinking is switched off through the chat template). Reasoning on a model without a thinking mode
appends `reason_suffix` and reads the answer after `answer_marker`. A transfer appends the kept
reasoning with `hint_template` to the question inside the user turn, so the large model's
image+question prefix is shared by `large_direct` and every `transfer_<K>` (two-stage decoding).
The labeller records these in the labels' metadata; models trained for the toy world use them verbatim.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass


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
