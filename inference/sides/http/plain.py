"""Plain calls of a served model (`routedvlm serve`'s plain models over an HTTP side): one request to the backend.

`complete` forwards a chat (thinking switched with `enable_thinking`, a final assistant message continued with vLLM's
`continue_final_message`), `complete_text` a raw prompt to the backend's `/completions`. Neither asks the backend
for logprobs (a passthrough should cost the backend what the client's own request would); the token counts are the
backend's `usage` (`ServedGeneration`), and the request's sampling (`sampling.plain`) is sent as it came. The
backend checks the context length itself (its 400 is the client's error).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from routedvlm.inference import sampling

from ..base import THINK_CLOSE, THINK_OPEN
from ..local.generation import Generation
from .openai_replies import PIECES, clean_text, message, openai_messages, split_reasoning, usage_counts


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


def complete(vlm, request, mode: str, *, max_tokens: int, min_tokens: int = 0, partial: str | None = None):
    """(ServedGeneration, answer or None while reasoning, reasoning or None) of one chat call of `vlm` (an OpenAIVLM)."""
    thinking = mode == "reason"
    body = _body(vlm, {"messages": openai_messages(request, request.messages())}, max_tokens, min_tokens)
    body["skip_special_tokens"] = False  # think tags that are special tokens stay in the text
    if vlm.style == "hybrid":
        body["chat_template_kwargs"] = {"enable_thinking": thinking}
    if vlm.style == "always" and not thinking and partial is None:
        partial = THINK_OPEN + "\n\n" + THINK_CLOSE + "\n\n"
    if partial is not None:
        body["messages"].append({"role": "assistant", "content": partial})
        body.update(continue_final_message=True, add_generation_prompt=False)
    t0 = time.perf_counter()
    resp = vlm.client.create(body, what=f"plain {mode} ({vlm.model_id})")
    msg = message(resp)
    text = (msg.get("reasoning_content") or msg.get("reasoning") or "") + (msg.get("content") or "")
    if not thinking or partial is not None:
        gen = _generation(resp, (time.perf_counter() - t0) * 1000, text)
        return gen, clean_text(msg.get("content") or text), None
    reasoning, answer = split_reasoning(msg, [])
    gen = _generation(resp, (time.perf_counter() - t0) * 1000, text, None)
    if gen.reasoning_count is None:
        gen.reasoning_count = min(len(PIECES.findall(reasoning)), gen.completion_tokens)
    return gen, answer, reasoning


def complete_text(vlm, prompt: str, *, max_tokens: int, min_tokens: int = 0) -> tuple[ServedGeneration, str]:
    """(ServedGeneration, text) of the backend continuing `prompt` as it is (its `/completions`)."""
    body = _body(vlm, {"prompt": prompt}, max_tokens, min_tokens)
    t0 = time.perf_counter()
    resp = vlm.client.create(body, what=f"text completion ({vlm.model_id})", path="/completions")
    text = resp["choices"][0].get("text") or ""
    return _generation(resp, (time.perf_counter() - t0) * 1000, text), text
