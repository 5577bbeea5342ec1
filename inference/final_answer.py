"""The final answer of a routed request as a client sees it: capped at `max_tokens`, its finish reason and usage.

The final answer call is the generate call that produced the strategy's answer (`Result.generation`): the
large model's answer for `large_direct` and transfers, the small model's for `small_direct` (on a ladder: the
answering model's, e.g. mid's for `mid_direct` and `transfer_small_mid_<K>`), and for
`*_reason` the reasoning call (the answer follows its think block) or, when that hit its limit, the call that
finished the answer. Usage counts that call: `prompt_tokens` its whole prompt (`cached_tokens` the reused
part), `completion_tokens` its output (reasoning included, like vLLM and OpenAI) up to `max_tokens`.
"""
from __future__ import annotations

def answer_side(pipeline, result):
    """(the VLM that made the final answer call, "direct" or "reason")."""
    from routedvlm.router.strategies import is_strategy, parse_strategy

    strat = parse_strategy(result.strategy) if is_strategy(result.strategy) else None
    side = pipeline.sides.get(strat.model, pipeline.large) if strat is not None else pipeline.large
    if strat is not None and strat.mode == "reason":
        one_call = result.generation is result.reasoning_generation
        return side.reasoning_side(), "reason" if one_call else "direct"
    return side, "direct"


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
    text = vlm.answer_text(ids[:max_tokens], kind) if truncated else result.answer
    ids = ids[:max_tokens] if truncated else ids
    budget = pipeline.config.max_reason_tokens if kind == "reason" else pipeline.config.max_direct_tokens
    reason = "length" if truncated or vlm.hit_limit(gen, budget) else "stop"
    prompt = int(gen.prefill_tokens) + int(gen.cached_tokens)
    reasoning = vlm.reasoning_token_count(ids) if kind == "reason" else 0
    return text, reason, usage(prompt, len(ids), int(gen.cached_tokens), reasoning)
