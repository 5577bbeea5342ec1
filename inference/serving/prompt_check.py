"""Checks of a chat request against the served models, before any model call: special-token text and prompt length.

`neutralise(messages, pattern)`: text a client typed that spells one of the sides' special tokens
(`<|image_pad|>`, `<|vision_start|>`, `<|im_end|>`, ...; not `<think>` / `</think>`, which reasoning text and the
OpenAI backend's prefilled think blocks carry) gets a WORD JOINER (U+2060) after its first character, so the processor tokenizes it as plain text instead of as the special token (which would, e.g., claim
image positions that no image fills). `check_routed_prompt` counts the routed request's prompt tokens on every
local side, after the router's prompt template and the chat template, image tokens included, and answers 400
`context_length_exceeded` when the prompt passes `--max-prompt-tokens` or the prompt plus the longest generation
of the pipeline does not fit that side's context. A side that cannot count here (`ModelSide.count_prompt_tokens`
is None: a server) is left to its server.
"""
from __future__ import annotations

import re

from ..sides.base import THINK_CLOSE, THINK_OPEN
from .completions import context_of
from .protocol import APIError, check_context

JOINER = "\u2060"


def served_sides(routed) -> list:
    """The sides of a RoutedVLM (answerers and reasoners), each once."""
    from ..pipeline_parts import pipeline_sides

    out = []
    for vlm in pipeline_sides(routed.pipeline).values():
        for side in (vlm, vlm.reasoner):
            if side is not None and all(side is not s for s in out):
                out.append(side)
    return out


def special_pattern(routed) -> re.Pattern | None:
    """A regex matching every special token of the sides' tokenizers (but the think tags); None when none."""
    tokens = set()
    for side in served_sides(routed):
        tokens.update(t for t in side.special_tokens() if len(t) > 1)
    tokens -= {THINK_OPEN, THINK_CLOSE}
    if not tokens:
        return None
    return re.compile("|".join(re.escape(t) for t in sorted(tokens, key=len, reverse=True)))


def neutralise(messages: list, pattern: re.Pattern | None) -> int:
    """Break every added-token spelling in the text parts of `messages` (in place); returns how many were broken."""
    if pattern is None:
        return 0
    count = 0

    def split(match):
        nonlocal count
        count += 1
        return match.group(0)[0] + JOINER + match.group(0)[1:]

    for msg in messages:
        for part in msg["content"]:
            if part["type"] == "text" and part["text"]:
                part["text"] = pattern.sub(split, part["text"])
    return count


def check_routed_context(routed, req) -> None:
    """A 400 when the routed request's `max_tokens` does not fit the smallest known context of the ladder's models."""
    from ..pipeline_parts import pipeline_sides

    if req.max_tokens is not None:
        contexts = [c for c in map(context_of, pipeline_sides(routed.pipeline).values()) if c]
        check_context(req.model, min(contexts) if contexts else None, 0, req.max_tokens)


def check_routed_prompt(routed, messages: list, max_prompt_tokens: int | None, model: str) -> int:
    """The largest prompt (tokens) of the routed request on any local side; 400 when it passes a limit."""
    request = routed._request(messages=messages)
    cfg = routed.pipeline.config
    budget = cfg.max_reason_tokens + cfg.max_direct_tokens  # reasoning kept in a transfer prompt, then the answer
    largest = 0
    for side in served_sides(routed):
        n = side.count_prompt_tokens(request)
        if n is None:
            continue
        largest = max(largest, n)
        context = context_of(side)
        if max_prompt_tokens is not None and n > max_prompt_tokens:
            raise APIError(400, f"The prompt of this request is {n} tokens after the chat template (on {side.name!r}); "
                                f"this server accepts at most {max_prompt_tokens} (routedvlm serve --max-prompt-tokens). "
                                "Shorten the messages.", param="messages", code="context_length_exceeded")
        if context is not None and n + budget > context:
            raise APIError(400, f"The model {model!r} needs {n + budget} tokens for this request ({n} in the prompt on "
                                f"{side.name!r}, up to {budget} generated), more than the context of {context} tokens. "
                                "Shorten the messages.", param="messages", code="context_length_exceeded")
    return largest
