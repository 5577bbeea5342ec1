"""Response bodies of `routedvlm serve`: chat completions of the routed and the plain models, and stream chunks.

The routed model's usage is its final answer call's (see final_answer.py); its route is in the headers
`x-routedvlm-strategy` / `x-routedvlm-keep-tokens` (the models that ran: `x-routedvlm-models`, the one that answered:
`x-routedvlm-answer-model`) and in the field `routedvlm` (of the completion, or of the stream's last choice chunk).
The plain models (the ladder's aliases: "small", "large"; "small", "mid", "large"; ...) answer with one side alone (thinking per
`chat_template_kwargs.enable_thinking`, `max_tokens`, `logprobs`, `top_logprobs`, `min_tokens`, vLLM's
`continue_final_message`), so the server doubles as a stand-in vLLM-like server for the OpenAI backend.
"""
from __future__ import annotations

import functools
import json
import time
import uuid

from .. import sampling, streaming
from ..final_answer import usage as make_usage
from .protocol import APIError, ChatRequest, check_context


@functools.lru_cache(maxsize=1)
def routedvlm_version() -> str:
    """The installed routedvlm's version ("unknown" when it runs from a source tree that was never installed); read
    once (the metadata lookup parses files: a third of serve's event-loop time when it ran per stream chunk)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("routedvlm")
    except PackageNotFoundError:
        return "unknown"


def system_fingerprint() -> str:
    """`system_fingerprint` as vLLM sends it ("vllm-<version>"): here "routedvlm-<version>"."""
    return f"routedvlm-{routedvlm_version()}"


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


def completion(model: str, content, reasoning=None, *, finish="stop", logprobs=None, usage=None, extra=None) -> dict:
    """A chat.completion; the reasoning in `reasoning` and `reasoning_content` (vLLM 0.32 keeps both); `content` None
    while the reply was cut inside its reasoning (as vLLM)."""
    message = {"role": "assistant", "content": content, "tool_calls": []}  # vLLM's message lists its (no) tool calls
    if reasoning is not None:
        message["reasoning"] = message["reasoning_content"] = reasoning
    out = {"id": completion_id(), "object": "chat.completion", "created": int(time.time()),
           "system_fingerprint": system_fingerprint(), "model": model, "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": logprobs}],
           "usage": usage or make_usage(0, 0)}
    return out | (extra or {})


def route_headers(strategy: str, keep_tokens, models=(), decoded: bool = False) -> dict:
    """The route as headers: the strategy, its K, the models that ran (aliases, cheapest first, comma-separated), the
    model whose answer this is, and `x-routedvlm-answer-decoded-before-route: 1` when the answer was decoded before
    the route was decided (a cascade accepted its short answer: it streams as one delta, greedily decoded)."""
    from routedvlm.router.strategies import parse_strategy

    return {"x-routedvlm-strategy": strategy, "x-routedvlm-keep-tokens": "" if keep_tokens is None else str(keep_tokens),
            "x-routedvlm-models": ",".join(models), "x-routedvlm-answer-model": parse_strategy(strategy).model,
            "x-routedvlm-answer-decoded-before-route": "1" if decoded else "0"}


def route_info(out) -> dict:
    return {"strategy": out.strategy, "keep_tokens": out.keep_tokens, "p_correct": out.p_correct,
            "fallback": out.fallback, "models": list(out.models), "answer_model": out.answer_model, "trace": out.trace,
            "request_id": out.request_id, "audited": out.audited}


def routed_completion(out, model: str) -> tuple[dict, dict]:
    """(body, headers) of a routed request's RoutedOutput; `x-routedvlm-request-id` names it for gold feedback and
    `x-routedvlm-audited: 1` says a shadow audit of it was queued."""
    body = completion(model, out.text, finish=out.finish_reason, usage=out.usage, extra={"routedvlm": route_info(out)})
    decoded = out.decision.get("decoded_before_route", False)
    headers = {**route_headers(out.strategy, out.keep_tokens, out.models, decoded),
               "x-routedvlm-request-id": out.request_id, "x-routedvlm-audited": "1" if out.audited else "0"}
    return body, headers


def merge_choices(payloads: list) -> dict:
    """One completion of `n` choices from n single-choice completions: choice i from payload i, usage as vLLM counts
    it (the prompt once, the completions summed); the route (`routedvlm`) of the first."""
    first = dict(payloads[0])
    first["choices"] = [{**p["choices"][0], "index": i} for i, p in enumerate(payloads)]
    usages = [p["usage"] for p in payloads]
    completion_tokens = sum(u["completion_tokens"] for u in usages)
    first["usage"] = {**usages[0], "completion_tokens": completion_tokens,
                      "total_tokens": usages[0]["prompt_tokens"] + completion_tokens,
                      "completion_tokens_details": {"reasoning_tokens": sum(
                          (u.get("completion_tokens_details") or {}).get("reasoning_tokens", 0) for u in usages)}}
    return first


class Chunks:
    """`chat.completion.chunk` events of one streamed completion, as SSE `data:` lines."""

    def __init__(self, model: str, include_usage: bool, continuous: bool = False):
        self.id, self.created, self.model, self.include_usage = completion_id(), int(time.time()), model, include_usage
        self.continuous = include_usage and continuous  # vLLM: usage in every chunk with both options on
        self.prompt_tokens, self.completion_tokens = 0, 0

    def _event(self, choices: list, **extra) -> bytes:
        usage = None
        if self.continuous:
            usage = {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                     "total_tokens": self.prompt_tokens + self.completion_tokens}
        body = {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "system_fingerprint": system_fingerprint(), "choices": choices,
                **({"usage": usage} if self.include_usage else {}), **extra}
        return f"data: {json.dumps(body)}\n\n".encode()

    def delta(self, delta: dict, finish=None, tokens: int = 0, **extra) -> bytes:
        """One chunk; `tokens`: how many output tokens it carries (counted in the continuous usage)."""
        self.completion_tokens += tokens
        if "reasoning" in delta:
            delta = {**delta, "reasoning_content": delta["reasoning"]}
        return self._event([{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}], **extra)

    def end(self, finish: str, usage: dict, info: dict | None = None) -> bytes:
        """The last choice chunk (finish reason, the route in `routedvlm`), the usage chunk if asked, [DONE]."""
        self.prompt_tokens, self.completion_tokens = usage["prompt_tokens"], usage["completion_tokens"]
        out = self.delta({}, finish, **({"routedvlm": info} if info is not None else {}))
        if self.include_usage:
            body = {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                    "system_fingerprint": system_fingerprint(), "choices": [], "usage": usage}
            out += f"data: {json.dumps(body)}\n\n".encode()
        return out + b"data: [DONE]\n\n"

    @staticmethod
    def error(exc: APIError) -> bytes:
        return f"data: {json.dumps(exc.body())}\n\ndata: [DONE]\n\n".encode()


def context_of(vlm) -> int | None:
    """A side's context length (`ModelSide.context_length`); None when unknown."""
    return vlm.context_length()


def plain_model(routed, req: ChatRequest):
    """(the side answering a plain request, thinking on or off)."""
    from ..routed import pipeline_sides

    side = pipeline_sides(routed.pipeline)[req.model]
    think = req.enable_thinking is not False  # like a hybrid template, thinking is on unless switched off
    return ((side.reasoner or side) if think else side), think


def plain_completion(routed, req: ChatRequest, min_new_tokens: int, streamer=None) -> tuple[dict, dict]:
    """(body, headers) of a request to the plain model `req.model` (an alias of the ladder: "small", "large", ...): one
    `CollaborativePipeline.complete` call of that side, sampled with `req.sampling`; the headers name it as the model
    that ran and answered. `streamer`: handed to the local generate call (plain_stream.py)."""
    from routedvlm.errors import ModeUnavailableError

    from ..inputs import from_messages

    if req.raw_prompt is not None:
        return raw_completion(routed, req, min_new_tokens, streamer)
    messages, partial = req.messages, None
    if req.continue_final_message:
        last = messages[-1]
        if last["role"] != "assistant" or any(p["type"] != "text" for p in last["content"]):
            raise APIError(400, "continue_final_message needs a final assistant message with text only.",
                           param="messages", code="invalid_content")
        messages, partial = messages[:-1], "".join(p["text"] for p in last["content"])
    request = from_messages(messages)
    model, think = plain_model(routed, req)

    def check(prompt_tokens: int, max_tokens: int) -> None:
        check_context(req.model, model.context_length(), prompt_tokens, max_tokens)

    try:
        with routed.lock, sampling.plain(req.sampling), streaming.plain_streamer(streamer):  # one call at a time
            res = routed.pipeline.complete(req.model, request, thinking=think, partial=partial, max_tokens=req.max_tokens,
                                           min_tokens=min_new_tokens if req.min_tokens is None else req.min_tokens,
                                           check_context=check)
    except ModeUnavailableError as exc:
        raise APIError(400, str(exc), param="model", code="model_is_remote") from exc
    gen = res.generation
    if req.logprobs and gen.output_tokens and not gen.token_logprobs:  # a side whose plain calls carry none (HTTP)
        raise APIError(400, f"`logprobs` are not available from the model {req.model!r} here: it is served by another "
                       "server, which routedvlm serve passes plain requests through to; ask that server for them.",
                       param="logprobs", code="unsupported_parameter")
    logprobs = _logprobs(model, gen, req.top_logprobs) if req.logprobs else None
    reasoning_tokens = model.output_reasoning_tokens(gen) if res.reasoning is not None else 0
    use = make_usage(gen.prefill_tokens + gen.cached_tokens, gen.output_tokens, gen.cached_tokens, reasoning_tokens)
    answer, stopped = sampling.cut_at_stop(res.answer, req.sampling) if res.answer is not None else (None, False)
    finish = "stop" if stopped else res.finish_reason
    return completion(req.model, answer, res.reasoning, finish=finish, logprobs=logprobs, usage=use,
                      extra={"routedvlm": {"trace": res.trace}}), {"x-routedvlm-models": req.model,
                                                                   "x-routedvlm-answer-model": req.model}


def raw_completion(routed, req: ChatRequest, min_new_tokens: int, streamer=None) -> tuple[dict, dict]:
    """(body, headers) of a plain model continuing `req.raw_prompt` as it is (/v1/completions)."""
    from routedvlm.errors import ModeUnavailableError

    from ..sides.results import record
    from ..routed import pipeline_sides

    model = pipeline_sides(routed.pipeline)[req.model]
    limit = req.max_tokens or routed.pipeline.config.max_direct_tokens
    floor = min_new_tokens if req.min_tokens is None else req.min_tokens

    def check(prompt_tokens: int) -> None:
        check_context(req.model, model.context_length(), prompt_tokens, limit)

    try:
        with routed.lock, sampling.plain(req.sampling), streaming.plain_streamer(streamer):
            gen, text = model.complete_text(req.raw_prompt, max_tokens=limit, min_tokens=min(floor, limit),
                                            check_context=check)
    except ModeUnavailableError as exc:
        raise APIError(400, str(exc), param="model", code="model_is_remote") from exc
    text, stopped = sampling.cut_at_stop(text, req.sampling)
    finish = "stop" if stopped or not model.hit_limit(gen, limit) else "length"
    use = make_usage(gen.prefill_tokens + gen.cached_tokens, gen.output_tokens, gen.cached_tokens)
    rec = record(f"{req.model}_text", req.model, model, "text", gen)
    return completion(req.model, text, finish=finish, usage=use, extra={"routedvlm": {"trace": [rec]}}), {
        "x-routedvlm-models": req.model, "x-routedvlm-answer-model": req.model}


def _token(side, tid) -> dict:
    text = tid if isinstance(tid, str) else side.tokenizer.decode([int(tid)])  # an HTTP side's tokens are strings
    return {"token": text, "bytes": list(text.encode("utf-8"))}


def _logprobs(side, gen, top: int) -> dict:
    """OpenAI `logprobs.content` for every generated token. `top_logprobs` holds the top alternatives for the
    FIRST token only (from its full logits); later tokens list just the chosen token."""
    import torch

    content = []
    for i, (tid, lp) in enumerate(zip(gen.token_ids, gen.token_logprobs)):
        entry = {**_token(side, tid), "logprob": float(lp), "top_logprobs": []}
        if top:
            if i == 0 and gen.first_logits is not None:
                logp = torch.log_softmax(gen.first_logits[0].float(), dim=-1)
                vals, idx = logp.topk(min(top, logp.shape[-1]))
                entry["top_logprobs"] = [{**_token(side, j), "logprob": float(v)} for v, j in zip(vals.tolist(), idx.tolist())]
            else:
                entry["top_logprobs"] = [{**_token(side, tid), "logprob": float(lp)}]
        content.append(entry)
    return {"content": content}
