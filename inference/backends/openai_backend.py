"""A VLM behind an OpenAI-compatible chat-completions server (vLLM, SGLang, `routedvlm serve`): `OpenAIVLM`.

`VLM.from_openai(base_url, model, ...)` returns one. Images go as base64 PNG data URLs; thinking is switched
with `chat_template_kwargs={"enable_thinking": ...}` (vLLM/SGLang pass it to the chat template); decoding is
greedy (`temperature=0`); `max_tokens`, `min_tokens` (vLLM/SGLang extension) and `logprobs`/`top_logprobs` are
sent for the features. The answer comes from `content`, the reasoning from `reasoning_content` (a server with a
reasoning parser) or from a `<think>…</think>` block in `content`. A reasoning run that stops inside its
reasoning is finished with vLLM's `continue_final_message`. The attention selector is unavailable (no
attention weights over HTTP).

Measured over HTTP, approximately:
- two-stage decoding relies on the SERVER's prefix caching (vLLM `--enable-prefix-caching`, SGLang's radix
  cache): the escalation is a second request whose prompt starts with the same image + question, and the
  server reuses its KV cache; `cached_tokens` comes from `usage.prompt_tokens_details.cached_tokens` when the
  server reports it (vLLM: `--enable-prompt-tokens-details`), else 0; `prefill_tokens` = prompt - cached;
- stage times are the request's wall time, reported as `decode_ms` (vision_ms = prefill_ms = 0), unless the
  server returns a `routedvlm.trace` record (routedvlm serve does) with its own split; per-token times
  (`token_times_ms`) are spread linearly over the decode time;
- tokens are the server's token strings from `logprobs.content` (without logprobs: whitespace pieces);
  first-token entropy is computed from the first token's `top_logprobs` with the remaining probability
  mass as one extra outcome — a lower-fidelity value than a local model's full-vocabulary entropy.
"""
from __future__ import annotations

import base64
import io
import logging
import math
import re
import time

from routedvlm.router.errors import ConfigError, ModeUnavailableError, one_of

from ..generation import Generation
from ..prompts import DEFAULT_PROMPTS, PromptConfig
from ..stages import ReasoningRun, record
from ..vlm import THINK_CLOSE, THINK_OPEN, VLM
from .openai_http import ChatClient

logger = logging.getLogger(__name__)
THINKING = ("always", "hybrid", "never")
_PIECES = re.compile(r"\s*\S+")


class OpenAIVLM(VLM):
    """One side served by an OpenAI-compatible server. `thinking`: "hybrid" (the server's chat template
    switches thinking with `enable_thinking`), "always" (a thinking-only model: direct answers get an empty
    think block prefilled) or "never" (reasoning from `PromptConfig.reason_suffix`). `reasoner`: another
    OpenAIVLM (e.g. the -Thinking sibling) serving the reasoning mode."""

    remote = True

    def __init__(self, client: ChatClient, model: str, *, thinking: str = "hybrid", reasoner: "OpenAIVLM | None" = None,
                 prompts: PromptConfig | None = None, top_logprobs: int = 5, reason_prompt: bool = True):
        if thinking not in THINKING:
            raise ConfigError(f"The `thinking` parameter of VLM.from_openai must be one of {one_of(THINKING)}. "
                              f"Got {thinking!r} instead.")
        if isinstance(top_logprobs, bool) or not isinstance(top_logprobs, int) or not 0 <= top_logprobs <= 20:
            raise ConfigError(f"The `top_logprobs` parameter must be an integer in [0, 20]. Got {top_logprobs!r} instead.")
        self.client, self.model_id, self.style, self.reasoner = client, model, thinking, reasoner
        self.prompts, self.reason_prompt, self.top_logprobs = prompts or DEFAULT_PROMPTS, reason_prompt, top_logprobs
        self.name = f"{client.base_url}#{model}"
        self.model = self.processor = self.tokenizer = None
        self.think_close_id = None

    @classmethod
    def connect(cls, base_url: str, model: str, api_key: str | None = None, *, timeout: float = 60.0,
                max_retries: int = 2, thinking: str = "hybrid", reasoner=None, **kwargs) -> "OpenAIVLM":
        """An OpenAIVLM for `model` at `base_url` (e.g. 'http://127.0.0.1:8000/v1'); `reasoner` may be a
        model id on the same server."""
        client = ChatClient(base_url, api_key=api_key, timeout=timeout, max_retries=max_retries)
        if isinstance(reasoner, str):
            reasoner = cls(client, reasoner, thinking="always", prompts=kwargs.get("prompts"))
        return cls(client, model, thinking=thinking, reasoner=reasoner, **kwargs)

    @property
    def device(self) -> str:
        """Distinct per remote model, so the pipeline runs stage-one calls of two remote models concurrently."""
        return f"openai:{self.name}"

    def render(self, messages, mode):
        raise ModeUnavailableError(f"{self.name!r} is served over HTTP: the server applies its own chat template.")

    encode = render

    def decode(self, tokens) -> str:
        return "".join(tokens)

    # ----- one request ---------------------------------------------------------------------------------------
    def chat(self, request, question: str, *, thinking: bool, max_tokens: int, min_tokens: int = 0,
             partial: str | None = None, stage: str = "") -> tuple[Generation, dict]:
        """POST one chat completion for `request` with `question` as the last user text."""
        messages = _openai_messages(request, request.messages(question))
        body = {"model": self.model_id, "messages": messages, "max_tokens": max_tokens, "temperature": 0,
                "logprobs": True, "top_logprobs": self.top_logprobs}
        if min_tokens:
            body["min_tokens"] = min(min_tokens, max_tokens)
        if self.style == "hybrid":
            body["chat_template_kwargs"] = {"enable_thinking": thinking}
        if self.style == "always" and not thinking and partial is None:
            partial = THINK_OPEN + "\n\n" + THINK_CLOSE + "\n\n"
        if partial is not None:
            messages.append({"role": "assistant", "content": partial})
            body.update(continue_final_message=True, add_generation_prompt=False)
        t0 = time.perf_counter()
        resp = self.client.create(body, what=f"{stage or 'chat'} ({self.model_id})")
        return _generation(resp, (time.perf_counter() - t0) * 1000), resp

    # ----- the stage API the pipeline calls for remote sides (see stages.py) --------------------------------
    def run_direct(self, side: str, request, cfg):
        gen, resp = self.chat(request, request.question, thinking=False, max_tokens=cfg.max_direct_tokens,
                              min_tokens=cfg.min_new_tokens, stage=f"{side}_direct")
        answer = clean_text(_message(resp).get("content") or "")
        return gen, answer, record(f"{side}_direct", side, self, self.mode_name("direct"), gen, remote=True)

    def run_reasoning(self, side: str, request, cfg, max_tokens: int) -> ReasoningRun:
        vlm = self.reasoning_side()
        question = vlm.question_for(request.question, "reason")
        gen, resp = vlm.chat(request, question, thinking=True, max_tokens=max_tokens,
                             min_tokens=min(cfg.min_reason_tokens, max_tokens), stage=f"{side}_reason")
        reasoning, answer = vlm._split(_message(resp))
        choice = resp["choices"][0]
        tokens = _reasoning_tokens(gen.token_ids, reasoning, thinking=vlm.style != "never",
                                   stopped=choice.get("finish_reason") == "stop",
                                   has_logprobs=bool((choice.get("logprobs") or {}).get("content")))
        rec = record(f"{side}_reason", side, vlm, vlm.mode_name("reason"), gen, reasoning_tokens=len(tokens), remote=True)
        run = ReasoningRun(vlm, side, gen, None, tokens, reasoning, answer, [rec])
        run._request = request
        return run

    def _split(self, message: dict) -> tuple[str, str | None]:
        """(reasoning, answer or None) of a reasoning-mode reply."""
        content, reasoning = message.get("content"), message.get("reasoning_content") or message.get("reasoning")
        if self.style == "never":
            text = content or ""
            marker = self.prompts.answer_marker
            return (text.split(marker, 1)[0], clean_text(text.split(marker, 1)[1])) if marker in text else (text, None)
        if reasoning is None and content and THINK_CLOSE in content:
            reasoning, content = content.split(THINK_CLOSE, 1)
            reasoning = reasoning.replace(THINK_OPEN, "")
        elif reasoning is None:  # no parser and no closing tag: still reasoning
            return (content or "").replace(THINK_OPEN, ""), None
        return reasoning, (clean_text(content) if content is not None else None)

    def finish_answer(self, run: ReasoningRun, cfg) -> ReasoningRun:
        """Close a reasoning run that hit its limit and ask for the answer (vLLM `continue_final_message`)."""
        opener = "" if self.style == "never" else THINK_OPEN + "\n"
        request = run._request
        question = self.question_for(request.question, "reason")
        gen, resp = self.chat(request, question, thinking=True, max_tokens=cfg.max_direct_tokens,
                              min_tokens=cfg.min_new_tokens, partial=opener + run.reasoning_text + self.close_text(),
                              stage=f"{run.side}_reason_answer")
        msg = _message(resp)
        run.answer, run.answer_gen = clean_text(msg.get("content") or msg.get("reasoning_content") or ""), gen
        run.records.append(record(f"{run.side}_reason_answer", run.side, self, self.mode_name("reason"), gen, remote=True))
        return run

    def large_prompt(self, request, cfg) -> "RemotePrompt":
        return RemotePrompt(self, request, cfg)

    def answer_prompt(self, request, question: str, stage: str, cfg):
        """A direct answer to `question` about the request's image (a cold one-stage transfer)."""
        gen, resp = self.chat(request, question, thinking=False, max_tokens=cfg.max_direct_tokens,
                              min_tokens=cfg.min_new_tokens, stage=stage)
        return gen, clean_text(_message(resp).get("content") or ""), record(stage, "large", self, self.mode_name("direct"), gen, remote=True)


class RemotePrompt:
    """The remote counterpart of `stages.LargePrompt`: prompts are questions (the server renders them) and
    the image+question prefix is cached by the server, so `prefix_record` costs nothing here."""

    def __init__(self, vlm: OpenAIVLM, request, cfg):
        self.vlm, self.request, self.cfg = vlm, request, cfg
        self.direct_text = request.question
        empty = Generation([], [], float("nan"), [], 0.0, 0.0, 0.0, 0, 0)
        self.prefix_record = record("large_prefix", "large", vlm, "prefix", empty, remote=True)

    def transfer_text(self, reasoning: str) -> str:
        return self.vlm.prompts.transfer_question(self.request.question, reasoning)

    def answer(self, text: str, stage: str, *, restore_rope: bool = True):
        return self.vlm.answer_prompt(self.request, text, stage, self.cfg)

    def attention_scores(self, reasoning: str):
        raise ModeUnavailableError(
            f"The attention selector needs the large model's attention weights, which {self.vlm.name!r} does not "
            "expose over HTTP. Use selector='prefix' or 'suffix' with remote models."
        )


def clean_text(text: str) -> str:
    """An answer as VLM.clean_answer leaves it: think blocks dropped, whitespace collapsed."""
    if THINK_CLOSE in text:
        text = text.rsplit(THINK_CLOSE, 1)[1]
    return re.sub(r"\s+", " ", text.replace(THINK_OPEN, "")).strip()


def _message(resp: dict) -> dict:
    return resp["choices"][0].get("message") or {}


def image_data_url(image) -> str:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _openai_messages(request, hf_messages: list) -> list:
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


def _entropy(top: list) -> float:
    """Entropy (nats) of the first token's distribution from its top_logprobs, the rest of the mass as one outcome."""
    ps = [math.exp(t["logprob"]) for t in top if t.get("logprob") is not None and math.isfinite(t["logprob"])]
    rest = max(0.0, 1.0 - sum(ps))
    return -sum(p * math.log(p) for p in ps if p > 0) - (rest * math.log(rest) if rest > 0 else 0.0)


def _generation(resp: dict, wall_ms: float) -> Generation:
    choice = resp["choices"][0]
    entries = (choice.get("logprobs") or {}).get("content") or []
    msg = choice.get("message") or {}
    if entries:
        tokens, logprobs = [e["token"] for e in entries], [float(e["logprob"]) for e in entries]
    else:
        tokens = _PIECES.findall((msg.get("reasoning_content") or "") + (msg.get("content") or ""))
        logprobs = []
    entropy = _entropy(entries[0].get("top_logprobs") or []) if entries and entries[0].get("top_logprobs") else float("nan")
    usage = resp.get("usage") or {}
    prompt = int(usage.get("prompt_tokens") or 0)
    cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    server = ((resp.get("routedvlm") or {}).get("trace") or [None])[0]
    if server:
        vision, prefill, decode = (float(server.get(k, 0.0)) for k in ("vision_ms", "prefill_ms", "decode_ms"))
    else:
        vision, prefill, decode = 0.0, 0.0, wall_ms
    n = len(tokens)
    times = [decode * i / max(n - 1, 1) for i in range(n)]
    return Generation(tokens, logprobs, entropy, times, vision, prefill, decode, max(prompt - cached, 0), cached)


def _reasoning_tokens(tokens: list, reasoning: str, *, thinking: bool, stopped: bool, has_logprobs: bool) -> list:
    """The reasoning's tokens, as the local `VLM.split_reasoning` takes them. A thinking mode: the tokens before
    `</think>` (a leading `<think>` skipped), or all of them when it never closed (the final stop token dropped
    when the run stopped). No thinking mode: the leading tokens whose text covers the reasoning. Without
    logprobs: whitespace pieces of the reasoning text."""
    if not has_logprobs:
        return _PIECES.findall(reasoning or "")
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


__all__ = ["OpenAIVLM", "RemotePrompt", "clean_text", "image_data_url"]
