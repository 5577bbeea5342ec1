"""The final answer of a routed request as a client sees it: capped at `max_tokens`, its finish reason and usage.

The final answer call is the generate call that produced the strategy's answer (`Result.generation`): the
large model's answer for `large_direct` and transfers, the small model's for `small_direct` (on a ladder: the
answering model's, e.g. mid's for `mid_direct` and `transfer_small_mid_<K>`), and for
`*_reason` the reasoning call (the answer follows its think block) or, when that hit its limit, the call that
finished the answer. Usage counts that call: `prompt_tokens` its whole prompt (`cached_tokens` the reused
part), `completion_tokens` its output (reasoning included, like vLLM and OpenAI): its reasoning, then at most
`max_tokens` answer tokens. `max_tokens` bounds the visible answer only: the strategy's reasoning has its own budget
(`PipelineConfig.max_reason_tokens`, the router's K), so reasoning never eats the answer.
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


def reasoning_prefix(vlm, ids, kind: str) -> int:
    """How many leading output tokens of an answer call are reasoning (its think block through the closing tag, or a
    reasoning call's reasoning): the visible answer's budget starts after them."""
    n = vlm.reasoning_prefix(ids)
    if n or kind != "reason":
        return n
    return min(len(ids), vlm.reasoning_token_count(ids))


def capped_ids(vlm, ids, kind: str, max_tokens: int | None) -> list:
    """The output tokens a client is given: the reasoning, then at most `max_tokens` answer tokens."""
    ids = list(ids)
    if max_tokens is None:
        return ids
    return ids[: reasoning_prefix(vlm, ids, kind) + max_tokens]


def finish(pipeline, result, max_tokens: int | None = None, stop=None) -> tuple[str, str, dict]:
    """(answer text, finish_reason "stop" / "length", usage) of a strategy's Result, its answer capped at `max_tokens`
    tokens (the reasoning before it has its own budget, the pipeline's `max_reason_tokens`) and cut at a stop string
    of `stop` (a sampling.Sampling). Usage: `completion_tokens` the answer call's output up to the cap (reasoning
    included), `reasoning_tokens` the reasoning the answer follows (in that call, or the reasoning run before it)."""
    from .sampling import cut_at_stop

    gen = result.generation
    if gen is None:
        return result.answer, "stop", usage(0, 0)
    vlm, kind = answer_side(pipeline, result)
    ids = list(gen.token_ids)
    kept = capped_ids(vlm, ids, kind, max_tokens)
    truncated = len(kept) < len(ids)
    text = vlm.answer_text(kept, kind) if truncated else result.answer
    text, stopped = cut_at_stop(text or "", stop)
    budget = pipeline.config.max_reason_tokens if kind == "reason" else pipeline.config.max_direct_tokens
    reason = "stop" if stopped else "length" if truncated or vlm.hit_limit(gen, budget) else "stop"
    prompt = int(gen.prefill_tokens) + int(gen.cached_tokens)
    before = _reasoning_run(result)  # a reasoning run its limit cut, closed by this second call
    reasoning = vlm.reasoning_token_count(kept) if kind == "reason" else max(reasoning_prefix(vlm, kept, kind) - 1, 0)
    return text, reason, usage(prompt, len(kept) + before, int(gen.cached_tokens), reasoning + before)


def _reasoning_run(result) -> int:
    """Output tokens of a `*_reason` strategy's reasoning call when a second call wrote the answer (0 otherwise)."""
    run = result.reasoning_generation
    if run is None or run is result.generation or not str(result.strategy).endswith("_reason"):
        return 0
    return len(run.token_ids)
