"""POST /v1/completions (vLLM's and `vllm bench serve`'s default route): a request with a `prompt` answered through the
chat machinery. A plain model continues the prompt text as it is (no chat template, like vLLM); the routed model takes
the prompt as the user's question (routing needs a question, and the router was trained on chat prompts). One prompt
per request (a string, or a list of one string or of token ids of one prompt is not taken); `echo`, `suffix` and
`logprobs` are refused. The reply is a `text_completion` (choices carry `text`); streamed, `text_completion` chunks.
"""
from __future__ import annotations

import json

from .completions import Chunks, system_fingerprint
from .protocol import APIError

TEXT_REFUSED = ("echo", "suffix", "logprobs", "prompt_embeds")


def _bad(message, param, code="invalid_value"):
    return APIError(400, message, param=param, code=code)


def chat_body(body) -> dict:
    """The chat-completions body of a completions body (`_raw_prompt`: the prompt, continued as it is by a plain
    model)."""
    if not isinstance(body, dict):
        raise _bad("The request body must be a JSON object.", None, "invalid_json")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str) or not prompt:
        raise _bad("`prompt` must be one non-empty string (one prompt per request here; token ids are not taken). "
                   f"Got {type(prompt).__name__}.", "prompt")
    for name in TEXT_REFUSED:
        if body.get(name) not in (None, False, 0, ""):
            raise _bad(f"`{name}` is not supported by routedvlm serve's /v1/completions. Remove it.", name,
                       "unsupported_parameter")
    out = {k: v for k, v in body.items() if k != "prompt" and k not in TEXT_REFUSED}
    out["messages"] = [{"role": "user", "content": prompt}]
    out["_raw_prompt"] = prompt
    return out


def text_payload(payload: dict) -> dict:
    """A chat.completion as a text_completion (the reasoning, when a plain chat model reasoned, is not included)."""
    choices = [{"index": c["index"], "text": c["message"]["content"] or "", "logprobs": None,
                "finish_reason": c["finish_reason"], "stop_reason": None} for c in payload["choices"]]
    out = {**payload, "id": "cmpl-" + payload["id"].split("-", 1)[-1], "object": "text_completion", "choices": choices}
    return out


class TextChunks(Chunks):
    """`text_completion` chunks: each carries the new `text`; a delta without text (the role, the reasoning) is sent
    as nothing."""

    def _event(self, choices: list, **extra) -> bytes:
        text_choices = []
        for c in choices:
            delta = c["delta"]
            text = delta.get("content") or ""
            if not text and c["finish_reason"] is None:
                continue
            text_choices.append({"index": c["index"], "text": text, "logprobs": None, "finish_reason": c["finish_reason"]})
        if choices and not text_choices:
            return b""
        usage = None
        if self.continuous:
            usage = {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                     "total_tokens": self.prompt_tokens + self.completion_tokens}
        body = {"id": "cmpl-" + self.id.split("-", 1)[-1], "object": "text_completion", "created": self.created,
                "model": self.model, "system_fingerprint": system_fingerprint(), "choices": text_choices, **({"usage": usage} if self.include_usage else {}), **extra}
        return f"data: {json.dumps(body)}\n\n".encode()

    def end(self, finish: str, usage: dict, info: dict | None = None) -> bytes:
        out = super().end(finish, usage, info)
        return out.replace(b'"object": "chat.completion.chunk"', b'"object": "text_completion"')

