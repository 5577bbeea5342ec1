"""What every model side's stage methods return, whatever its kind (local, HTTP, in-process engine): `Generation` (one
generate call: tokens, log-probabilities, times), `ReasoningRun` (one reasoning-mode run and, when it got that far, its
answer) and `record` (the trace record of one call). Neutral ground: no kind imports another kind's modules for them.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Generation:
    """One generate call. Times in ms; `token_times_ms[i]` is cumulative decode time when token i was chosen
    (0 for the first token, which comes out of the prefill). Tensors (`first_logits`, `cache`) are not
    serialised by `to_dict`."""

    token_ids: list
    token_logprobs: list
    first_token_entropy: float
    token_times_ms: list
    vision_ms: float
    prefill_ms: float
    decode_ms: float
    prefill_tokens: int
    cached_tokens: int
    first_logits: object = field(default=None, repr=False)
    cache: object = field(default=None, repr=False)
    hidden: object = field(default=None, repr=False)  # HiddenStates when capture is on (see hidden.py)

    @property
    def output_tokens(self) -> int:
        return len(self.token_ids)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in (
            "token_ids", "token_logprobs", "first_token_entropy", "token_times_ms", "vision_ms",
            "prefill_ms", "decode_ms", "prefill_tokens", "cached_tokens")} | {"output_tokens": self.output_tokens}


@dataclass
class ReasoningRun:
    """One reasoning-mode run of a side: the reasoning tokens and, when it got that far, its answer."""

    vlm: object
    side: str
    gen: Generation
    prompt_ids: object
    reasoning_ids: list
    reasoning_text: str
    answer: str | None
    records: list = field(default_factory=list)
    answer_gen: Generation | None = None
    inputs: dict = field(default=None, repr=False)  # the reasoning prompt's model inputs
    rope: object = field(default=None, repr=False)  # the Qwen-VL rope offset of that prompt


def record(stage: str, side: str, vlm, mode: str, gen: Generation, **extra) -> dict:
    """A trace record for one generate call of `side` ("small"/"large")."""
    return {
        "stage": stage, "model": side, "checkpoint": vlm.name, "mode": mode,
        "vision_ms": round(gen.vision_ms, 3), "prefill_ms": round(gen.prefill_ms, 3),
        "prefill_tokens": int(gen.prefill_tokens), "cached_tokens": int(gen.cached_tokens),
        "decode_ms": round(gen.decode_ms, 3), "decode_tokens": int(gen.output_tokens), **extra,
    }
