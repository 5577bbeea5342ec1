"""Reading OpenAI chat-completion replies: answer and reasoning text, tokens, usage, and the request messages.

The reasoning/answer split must not depend on how the server is configured. Three shapes occur with vLLM:
a reasoning parser (`--reasoning-parser qwen3`) returns `reasoning_content` (newer vLLM: `reasoning`) and the
answer in `content`; without one, `content` holds `reasoning </think> answer` when the think tags are ordinary
text (or `skip_special_tokens: false` was requested); and when the tags are special tokens that the server
drops from the text (vLLM's default), only the logprob token stream still shows `</think>`. `split_reasoning`
reads the tags from the text first and from the token stream second.
"""
from __future__ import annotations

import base64
import io
import math
import re

from ..results import Generation
from ..base import THINK_CLOSE, THINK_OPEN

PIECES = re.compile(r"\s*\S+")


def clean_text(text: str) -> str:
    """An answer as VLM.clean_answer leaves it: think blocks dropped, whitespace collapsed."""
    if THINK_CLOSE in text:
        text = text.rsplit(THINK_CLOSE, 1)[1]
    return re.sub(r"\s+", " ", text.replace(THINK_OPEN, "")).strip()


def message(resp: dict) -> dict:
    return resp["choices"][0].get("message") or {}


def logprob_tokens(resp: dict) -> list:
    """The generated tokens' strings from `logprobs.content` ([] when the server sent no logprobs)."""
    entries = (resp["choices"][0].get("logprobs") or {}).get("content") or []
    return [e["token"] for e in entries]


def _reasoning_field(msg: dict):
    return msg.get("reasoning_content") if msg.get("reasoning_content") is not None else msg.get("reasoning")


def split_reasoning(msg: dict, tokens: list) -> tuple[str, str | None]:
    """(reasoning, answer or None while still reasoning) of a thinking-mode reply (see the module docstring)."""
    content, reasoning = msg.get("content"), _reasoning_field(msg)
    if reasoning is not None:  # the server's reasoning parser split it
        if not content and THINK_CLOSE not in tokens and THINK_CLOSE not in reasoning:
            return reasoning.replace(THINK_OPEN, ""), None  # a parser keeps an unclosed block as reasoning
        if THINK_CLOSE in reasoning:
            reasoning, rest = reasoning.split(THINK_CLOSE, 1)
            content = rest + (content or "")
        return reasoning.replace(THINK_OPEN, ""), clean_text(content or "")
    content = content or ""
    if THINK_CLOSE in content:
        head, tail = content.split(THINK_CLOSE, 1)
        return head.replace(THINK_OPEN, ""), clean_text(tail)
    if THINK_CLOSE in tokens:  # the tag is a special token the server left out of the text
        body = [t for t in tokens[: tokens.index(THINK_CLOSE)] if t != THINK_OPEN]
        head = "".join(body)
        if content.startswith(head):
            return head, clean_text(content[len(head):])
        return head, clean_text("".join(t for t in tokens[tokens.index(THINK_CLOSE) + 1:] if not _special(t)))
    return content.replace(THINK_OPEN, ""), None


def _special(token: str) -> bool:
    return token.startswith("<|") and token.endswith("|>")


def direct_text(msg: dict, tokens: list) -> str:
    """The answer of a direct-mode reply. A reasoning parser that finds no `</think>` may file the whole answer
    as reasoning (some vLLM versions do for Qwen3); then that is the answer."""
    content, reasoning = msg.get("content"), _reasoning_field(msg)
    if not content and reasoning and THINK_CLOSE not in tokens and THINK_CLOSE not in reasoning:
        return clean_text(reasoning)
    if reasoning and THINK_CLOSE in reasoning and not content:
        return clean_text(reasoning)
    return clean_text(content or "")


def image_data_url(image) -> str:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def openai_messages(request, hf_messages: list) -> list:
    """HF chat messages (image placeholders) -> OpenAI messages with the request's image as a data URL."""
    url = request.__dict__.get("_data_url")
    if url is None and request.image is not None:  # a text-only chat has no image
        url = request.__dict__["_data_url"] = image_data_url(request.image)
    out = []
    for msg in hf_messages:
        content = msg["content"]
        if isinstance(content, list):
            content = [{"type": "image_url", "image_url": {"url": url}} if p.get("type") == "image"
                       else {"type": "text", "text": p.get("text", "")} for p in content]
        out.append({"role": msg["role"], "content": content})
    return out


def entropy(top: list) -> float:
    """Entropy (nats) of the first token's distribution from its top_logprobs, the rest of the mass as one outcome."""
    ps = [math.exp(t["logprob"]) for t in top if t.get("logprob") is not None and math.isfinite(t["logprob"])]
    rest = max(0.0, 1.0 - sum(ps))
    return -sum(p * math.log(p) for p in ps if p > 0) - (rest * math.log(rest) if rest > 0 else 0.0)


def usage_counts(resp: dict) -> tuple[int, int | None]:
    """(prompt tokens, cached prompt tokens or None when the server does not report them)."""
    usage = resp.get("usage") or {}
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return int(usage.get("prompt_tokens") or 0), (None if cached is None else int(cached))


def image_tokens(resp: dict) -> int | None:
    """The prompt's image tokens when the server reports them (vLLM: `prompt_tokens_details.multimodal_tokens`)."""
    details = (resp.get("usage") or {}).get("prompt_tokens_details")
    mm = details.get("multimodal_tokens") if isinstance(details, dict) else None
    value = mm.get("image") if isinstance(mm, dict) else None
    return int(value) if isinstance(value, (int, float)) and value > 0 else None


def generation(resp: dict, wall_ms: float) -> Generation:
    """A Generation from one reply: tokens and logprobs, first-token entropy, usage, times (see sides/http/side.py)."""
    choice = resp["choices"][0]
    entries = (choice.get("logprobs") or {}).get("content") or []
    msg = choice.get("message") or {}
    if entries:
        tokens, logprobs = [e["token"] for e in entries], [float(e["logprob"]) for e in entries]
    else:
        tokens = PIECES.findall((_reasoning_field(msg) or "") + (msg.get("content") or ""))
        logprobs = []
    first = entropy(entries[0].get("top_logprobs") or []) if entries and entries[0].get("top_logprobs") else float("nan")
    prompt, cached = usage_counts(resp)
    cached = cached or 0
    server = ((resp.get("routedvlm") or {}).get("trace") or [None])[0]
    if server:
        vision, prefill, decode = (float(server.get(k, 0.0)) for k in ("vision_ms", "prefill_ms", "decode_ms"))
    else:
        vision, prefill, decode = 0.0, 0.0, wall_ms
    n = len(tokens)
    times = [decode * i / max(n - 1, 1) for i in range(n)]
    return Generation(tokens, logprobs, first, times, vision, prefill, decode, max(prompt - cached, 0), cached)


def reasoning_tokens(tokens: list, reasoning: str, *, thinking: bool, stopped: bool, has_logprobs: bool) -> list:
    """The reasoning's tokens, as the local `VLM.split_reasoning` takes them. A thinking mode: the tokens before
    `</think>` (a leading `<think>` skipped), or all of them when it never closed (the final stop token dropped
    when the run stopped). No thinking mode: the leading tokens whose text covers the reasoning. Without
    logprobs: whitespace pieces of the reasoning text."""
    if not has_logprobs:
        return PIECES.findall(reasoning or "")
    toks = list(tokens)
    if thinking:
        toks = toks[1:] if toks[:1] == [THINK_OPEN] else toks
        if THINK_CLOSE in toks:
            return toks[: toks.index(THINK_CLOSE)]
        return toks[:-1] if stopped else toks
    target, out, text = (reasoning or "").strip(), [], ""
    for tok in toks:
        if len(text.strip()) >= len(target):
            break
        out.append(tok)
        text += tok
    return out
