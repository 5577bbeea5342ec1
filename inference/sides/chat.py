"""`ChatFormat`: how a side with a local tokenizer and chat template renders prompts and reads its outputs — one
object the local side (`VLM`) and the in-process engine side (`VLLMEngine`) both inherit, so an engine side renders
and answers exactly as the local side does.

It needs `tokenizer` (with its chat template), `style` ("hybrid", "always", "never"), `prompts` (PromptConfig),
`think_close_id` (the id of `</think>` when it is one token) and `eos_ids()` on the side.
"""
from __future__ import annotations

import re

from routedvlm.errors import ModelLoadError

from .base import THINK_CLOSE, THINK_OPEN

_PROBE = [{"role": "user", "content": "hi"}]


class ChatFormat:
    """Prompt rendering and output parsing through the side's own tokenizer and chat template (a mixin of sides)."""

    # ----- the chat template's modes ---------------------------------------------------------------------------
    def _render_probe(self, **kw) -> str:
        return self.tokenizer.apply_chat_template(_PROBE, tokenize=False, add_generation_prompt=True, **kw)

    def _detect_style(self) -> str:
        if not self.tokenizer.chat_template:
            raise ModelLoadError(f"The checkpoint {self.name!r} has no chat template; add one to its tokenizer.")
        on, off = self._render_probe(enable_thinking=True), self._render_probe(enable_thinking=False)
        if on != off:
            return "hybrid"
        return "always" if on.rstrip().endswith(THINK_OPEN) else "never"

    def _single_id(self, token: str):
        ids = self.tokenizer(token, add_special_tokens=False)["input_ids"]
        return ids[0] if len(ids) == 1 else None

    def render(self, messages: list, mode: str) -> str:
        """The prompt text for `messages` in `mode` ("direct" or "reason"), ending where the model writes."""
        kw = {"enable_thinking": mode == "reason"} if self.style == "hybrid" else {}
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kw)
        if mode == "direct" and self.style == "always" and text.rstrip().endswith(THINK_OPEN):
            text = text.rstrip() + "\n\n" + THINK_CLOSE + "\n\n"
        return text

    def special_tokens(self) -> list[str]:
        return [t.content for t in self.tokenizer.added_tokens_decoder.values() if t.special]

    # ----- token ids and answers -----------------------------------------------------------------------------
    def text_ids(self, text: str) -> list:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def decode(self, ids) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def split_reasoning(self, ids: list):
        """(reasoning_ids, reasoning_text, answer_text or None) of a reasoning-mode generation."""
        eos = set(self.eos_ids())
        if self.style != "never":
            if self.think_close_id is not None and self.think_close_id in ids:
                i = ids.index(self.think_close_id)
                return ids[:i], self.decode(ids[:i]), self.clean_answer(ids[i + 1:])
            raw = self.tokenizer.decode(list(ids))
            if self.think_close_id is None and THINK_CLOSE in raw:  # `</think>` is not a single token here
                reasoning, answer = raw.split(THINK_CLOSE, 1)
                return self.text_ids(reasoning), reasoning, self.clean_answer(answer)
            body = [t for t in ids if t not in eos]
            return body, self.decode(body), None
        text = self.decode(ids)
        marker = self.prompts.answer_marker
        if marker in text:
            reasoning = text.split(marker, 1)[0]
            return self.text_ids(reasoning), reasoning, self.clean_answer(text.split(marker, 1)[1])
        body = [t for t in ids if t not in eos]
        return body, self.decode(body), None

    def clean_answer(self, ids_or_text) -> str:
        """The final answer text: special tokens, think blocks and an answer marker stripped."""
        if isinstance(ids_or_text, str):
            text = ids_or_text
        else:
            ids = list(ids_or_text)
            if self.think_close_id is not None and self.think_close_id in ids:
                ids = ids[len(ids) - ids[::-1].index(self.think_close_id):]
            text = self.decode(ids)
        if THINK_CLOSE in text:
            text = text.rsplit(THINK_CLOSE, 1)[1]
        text = text.replace(THINK_OPEN, "")
        if self.style == "never" and self.prompts.answer_marker in text:
            text = text.split(self.prompts.answer_marker, 1)[1]
        return re.sub(r"\s+", " ", text).strip()

    def answer_text(self, ids, kind: str) -> str:
        if kind == "reason":
            return self.split_reasoning(list(ids))[2] or ""
        return self.clean_answer(list(ids))

    def reasoning_token_count(self, ids) -> int:
        return len(self.split_reasoning(list(ids))[0])

    def reasoning_prefix(self, ids) -> int:
        ids = [int(t) for t in ids]
        close = self.think_close_id
        return len(ids) - ids[::-1].index(close) if close is not None and close in ids else 0

    def hit_limit(self, gen, budget: int) -> bool:
        return bool(gen.token_ids) and gen.token_ids[-1] not in set(self.eos_ids())
