"""The final answer of a routed request as a client sees it: capped at `max_tokens`, its finish reason and usage.

The final answer call is the generate call that produced the strategy's answer (`Result.generation`): the
large model's answer for `large_direct` and transfers, the small model's for `small_direct`, and for
`*_reason` the reasoning call (the answer follows its think block) or, when that hit its limit, the call that
finished the answer. Usage counts that call: `prompt_tokens` its whole prompt (`cached_tokens` the reused
part), `completion_tokens` its output (reasoning included, like vLLM and OpenAI) up to `max_tokens`.
"""
from __future__ import annotations

from .vlm import THINK_CLOSE


def answer_text(vlm, ids, kind: str) -> str:
    """The answer text of a final answer call's token ids: `kind` "direct" (the whole output is the answer) or
    "reason" (a reasoning call: the answer is what follows the think block; "" while still reasoning)."""
    if getattr(vlm, "remote", False):  # token strings of an OpenAI-compatible server
        from .backends.openai_backend import clean_text

        text = "".join(ids)
        if kind == "reason":
            return clean_text(text.split(THINK_CLOSE, 1)[1]) if THINK_CLOSE in text else ""
        return clean_text(text)
    if kind == "reason":
        return vlm.split_reasoning(list(ids))[2] or ""
    return vlm.clean_answer(list(ids))


def answer_side(pipeline, result):
    """(the VLM that made the final answer call, "direct" or "reason")."""
    strategy = result.strategy
    if strategy.endswith("_reason"):
        side = pipeline.small if strategy == "small_reason" else pipeline.large
        one_call = result.generation is result.reasoning_generation
        return side.reasoning_side(), "reason" if one_call else "direct"
    return (pipeline.small if strategy == "small_direct" else pipeline.large), "direct"


def _reasoning_tokens(vlm, ids, kind: str) -> int:
    if kind != "reason":
        return 0
    if getattr(vlm, "remote", False):
        return ids.index(THINK_CLOSE) if THINK_CLOSE in ids else len(ids)
    return len(vlm.split_reasoning(list(ids))[0])


def _hit_limit(vlm, gen, kind: str, config) -> bool:
    """Whether the call stopped at its token budget rather than at an end-of-sequence token."""
    if not gen.token_ids:
        return False
    if getattr(vlm, "remote", False):
        budget = config.max_reason_tokens if kind == "reason" else config.max_direct_tokens
        return len(gen.token_ids) >= budget
    return gen.token_ids[-1] not in set(vlm._eos_ids())


def usage(prompt: int, completion: int, cached: int = 0, reasoning: int = 0) -> dict:
    """An OpenAI `usage` object."""
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
            "completion_tokens_details": {"reasoning_tokens": reasoning}}


def finish(pipeline, result, max_tokens: int | None = None) -> tuple[str, str, dict]:
    """(answer text, finish_reason "stop" / "length", usage) of a strategy's Result, capped at `max_tokens`."""
    gen = result.generation
    if gen is None:
        return result.answer, "stop", usage(0, 0)
    vlm, kind = answer_side(pipeline, result)
    ids = list(gen.token_ids)
    truncated = max_tokens is not None and len(ids) > max_tokens
    text = answer_text(vlm, ids[:max_tokens], kind) if truncated else result.answer
    ids = ids[:max_tokens] if truncated else ids
    reason = "length" if truncated or _hit_limit(vlm, gen, kind, pipeline.config) else "stop"
    prompt = int(gen.prefill_tokens) + int(gen.cached_tokens)
    return text, reason, usage(prompt, len(ids), int(gen.cached_tokens), _reasoning_tokens(vlm, ids, kind))
