"""Raw-prompt calls of a served model (`routedvlm serve`'s plain models on /v1/completions over an HTTP side): one
request to the backend's `/completions` (plain chats go through `OpenAIVLM.complete`). It does not ask the backend
for logprobs (a passthrough should cost the backend what the client's own request would); the token counts are the
backend's `usage` (`ServedGeneration`), and the request's sampling (`sampling.plain`) is sent as it came. The
backend checks the context length itself (its 400 is the client's error).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from routedvlm.inference import sampling

from ..local.generation import Generation
from .openai_replies import PIECES, usage_counts


@dataclass
class ServedGeneration(Generation):
    """A Generation whose token counts are the backend's `usage` (the replies carry no token ids)."""

    completion_tokens: int = 0
    reasoning_count: int | None = None
    finish: str = "stop"

    @property
    def output_tokens(self) -> int:
        return self.completion_tokens


def _body(vlm, prompt_field: dict, max_tokens: int, min_tokens: int) -> dict:
    body = {"model": vlm.model_id, **prompt_field, "max_tokens": max_tokens, "temperature": 0}
    sample = sampling.current()
    if sample is not None:
        body.update(sampling.http_fields(sample))
    if min_tokens:
        body["min_tokens"] = min(min_tokens, max_tokens)
    return body


def _generation(resp: dict, wall_ms: float, text: str, reasoning_count: int | None = None) -> ServedGeneration:
    usage = resp.get("usage") or {}
    prompt, cached = usage_counts(resp)
    n = int(usage.get("completion_tokens") or len(PIECES.findall(text)))
    details = usage.get("completion_tokens_details") or {}
    if reasoning_count is None and isinstance(details, dict) and details.get("reasoning_tokens"):
        reasoning_count = int(details["reasoning_tokens"])
    tokens = PIECES.findall(text) or ([""] if n else [])  # non-empty when the server generated anything
    return ServedGeneration(tokens, [], float("nan"), [wall_ms * i / max(n - 1, 1) for i in range(n)],
                            0.0, 0.0, wall_ms, max(prompt - (cached or 0), 0), cached or 0, completion_tokens=n,
                            reasoning_count=reasoning_count, finish=resp["choices"][0].get("finish_reason") or "stop")


def complete_text(vlm, prompt: str, *, max_tokens: int, min_tokens: int = 0) -> tuple[ServedGeneration, str]:
    """(ServedGeneration, text) of the backend continuing `prompt` as it is (its `/completions`)."""
    body = _body(vlm, {"prompt": prompt}, max_tokens, min_tokens)
    t0 = time.perf_counter()
    resp = vlm.client.create(body, what=f"text completion ({vlm.model_id})", path="/completions")
    text = resp["choices"][0].get("text") or ""
    return _generation(resp, (time.perf_counter() - t0) * 1000, text), text
