"""A model side (`ModelSide`) behind an OpenAI-compatible chat-completions server (vLLM, SGLang, `routedvlm serve`).

`VLM.from_openai(base_url, model, ...)` returns one. Images go as base64 PNG data URLs; thinking is switched
with `chat_template_kwargs={"enable_thinking": ...}` (vLLM/SGLang pass it to the chat template); decoding is
greedy (`temperature=0`); `max_tokens`, `min_tokens` (vLLM/SGLang extension), `logprobs`/`top_logprobs` and
`skip_special_tokens: false` (so think tags that are special tokens stay in the text) are sent. Answer and
reasoning are split the same way with or without a server-side reasoning parser (`openai_replies.py`). A
reasoning run that stops inside its reasoning is finished with vLLM's `continue_final_message`. The attention
selector is unavailable (no attention weights over HTTP). A call made for a streamed request's answer (a streamer is
active, `streaming.py`) is sent with `stream: true` and the server's tokens are handed on as they arrive (`sse.py`);
the reply it returns is the one a non-streamed call gets. A plain model served by `routedvlm serve` over an HTTP side
is forwarded to its server (`complete`).

Measured over HTTP, approximately:
- two-stage decoding relies on the SERVER's prefix caching (vLLM `--enable-prefix-caching`, SGLang's radix
  cache): the escalation is a second request whose prompt starts with the same image + question, and the
  server reuses its KV cache (vLLM: whole blocks only, `--block-size`); `cached_tokens` comes from
  `usage.prompt_tokens_details.cached_tokens` (vLLM: `--enable-prompt-tokens-details`); `prefill_tokens` =
  prompt - cached. An escalation whose reply reports no cached tokens, or no prompt-token details at all,
  raises `BackendError` naming the server flags (`require_prefix_cache=False` turns that off);
- stage times are the request's wall time, reported as `decode_ms` (vision_ms = prefill_ms = 0), unless the
  server returns a `routedvlm.trace` record (routedvlm serve does) with its own split; per-token times
  (`token_times_ms`) are spread linearly over the decode time; a record whose prompt had no cached tokens
  says `n_images` (the image was encoded), so a fitted cost model prices its vision encoder;
- tokens are the server's token strings from `logprobs.content` (without logprobs: whitespace pieces);
  first-token entropy is computed from the first token's `top_logprobs` with the remaining probability
  mass as one extra outcome — a lower-fidelity value than a local model's full-vocabulary entropy.
- every call of one routed request carries the same session header (`x-session-id: <request id>`,
  `$ROUTEDVLM_SESSION_HEADER` renames it, empty: none), so a load balancer in front of several vLLM replicas that
  hashes on it (vllm-router `--policy consistent_hash`, Envoy's header hash) sends the escalation to the replica that
  holds the direct call's prefix (docs/deploy.md); a measured run's calls send the sample's namespace instead;
- `run_many` (the labeller) isolates its measurements with vLLM's `cache_salt` (`remote_prompt.py`): every
  standalone call is cold, the two-stage calls reuse only the prefix of this sample's `large_direct` call.
"""
from __future__ import annotations

import logging
import os
import time
import uuid
from pathlib import Path

from routedvlm.errors import ConfigError, ModeUnavailableError, one_of
from routedvlm.inference import sampling  # absolute: robust to the sides moving into folders

from .openai_http import ChatClient
from .sessions import SESSION_HEADER, SESSION_HEADER_ENV, measurement_salt, session_headers, shares_prefix  # noqa: F401
from .openai_replies import (clean_text, direct_text, generation, image_tokens, logprob_tokens, message,
                                       openai_messages, reasoning_tokens, split_reasoning, usage_counts)
from ...prompts import DEFAULT_PROMPTS, PromptConfig
from ..results import ReasoningRun, record
from ..base import THINK_CLOSE, THINK_OPEN, ModelSide

logger = logging.getLogger(__name__)
THINKING = ("always", "hybrid", "never")
REQUIRE_CACHE_ENV = "ROUTEDVLM_REQUIRE_PREFIX_CACHE"


class OpenAIVLM(ModelSide):
    """One side served by an OpenAI-compatible server. `thinking`: "hybrid" (the server's chat template
    switches thinking with `enable_thinking`), "always" (a thinking-only model: direct answers get an empty
    think block prefilled) or "never" (reasoning from `PromptConfig.reason_suffix`). `reasoner`: another
    OpenAIVLM (e.g. the -Thinking sibling) serving the reasoning mode. require_prefix_cache: an escalation that
    the server reports no reuse for raises (default; `ROUTEDVLM_REQUIRE_PREFIX_CACHE=0` turns it off).
    measure_cold: in a measured run (the labeller), also time each one-stage transfer cold (`remote_prompt.py`).
    Not stateful: the server takes concurrent requests and keeps no state of ours between them."""

    kind = "http"
    stateful = False
    returns_hidden_states = False

    def __init__(self, client: ChatClient, model: str, *, thinking: str = "hybrid", reasoner: "OpenAIVLM | None" = None,
                 prompts: PromptConfig | None = None, top_logprobs: int = 5, reason_prompt: bool = True,
                 require_prefix_cache: bool | None = None):
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
        if require_prefix_cache is None:
            require_prefix_cache = os.environ.get(REQUIRE_CACHE_ENV, "1").strip().lower() not in ("0", "false", "no")
        self.require_prefix_cache = bool(require_prefix_cache)

    @classmethod
    def connect(cls, base_url: str, model: str, api_key: str | None = None, *, timeout: float = 60.0,
                max_retries: int = 2, thinking: str = "hybrid", reasoner=None, **kwargs) -> "OpenAIVLM":
        """An OpenAIVLM for `model` at `base_url` (e.g. 'http://127.0.0.1:8000/v1'); `reasoner` may be a
        model id on the same server."""
        client = ChatClient(base_url, api_key=api_key, timeout=timeout, max_retries=max_retries)
        if isinstance(reasoner, str):
            reasoner = cls(client, reasoner, thinking="always", prompts=kwargs.get("prompts"),
                           require_prefix_cache=kwargs.get("require_prefix_cache"))
        return cls(client, model, thinking=thinking, reasoner=reasoner, **kwargs)

    @property
    def device(self) -> str:
        """Distinct per remote model, so the pipeline runs stage-one calls of two remote models concurrently."""
        return f"openai:{self.name}"

    def served(self) -> dict:
        """{"id", "root", "max_model_len"} the server reports for the model (`GET /v1/models`; empty when it cannot
        be asked)."""
        try:
            listed = self.client.models()
        except Exception:  # noqa: BLE001 - metadata only; the labelling run itself reports a dead server
            return {}
        for entry in listed:
            if entry.get("id") == self.model_id:
                return {k: entry[k] for k in ("id", "root", "max_model_len") if k in entry}
        return {}

    def describe(self) -> dict:
        """The server URL and model id, and what the server reports; `weights` is the served folder when it is
        readable here (same machine)."""
        served = self.served()
        root = served.get("root")
        return {"name": self.name, "server": self.client.base_url, "model_id": self.model_id, "served": served,
                "dtype": None, "device": "remote", "weights": root if root and Path(root).exists() else None,
                "checkpoint": None}

    def render(self, messages, mode):
        raise ModeUnavailableError(f"{self.name!r} is served over HTTP: the server applies its own chat template.")

    encode = render

    def complete(self, request, mode: str, *, max_tokens: int, min_tokens: int = 0, partial: str | None = None,
                 check_context=None):
        """One plain call forwarded to the server (`routedvlm serve`'s plain models): (Generation, answer or None while
        reasoning, reasoning or None). The server checks its own context length (`check_context` is not called)."""
        gen, resp = self.chat(request, request.question, thinking=mode == "reason", max_tokens=max_tokens,
                              min_tokens=min_tokens, partial=partial, stage="plain")
        if mode != "reason" or partial is not None:
            return gen, direct_text(message(resp), logprob_tokens(resp)), None
        reasoning, answer = self._split(message(resp), logprob_tokens(resp))
        return gen, answer, reasoning

    def complete_text(self, prompt: str, *, max_tokens: int, min_tokens: int = 0, check_context=None):
        """A raw continuation of `prompt` by the server's `/completions` (`plain.py`)."""
        from . import plain

        return plain.complete_text(self, prompt, max_tokens=max_tokens, min_tokens=min_tokens)

    def hit_limit(self, gen, budget: int) -> bool:
        finish = getattr(gen, "finish", None)  # a plain call's ServedGeneration carries the server's finish reason
        return finish == "length" if finish is not None else super().hit_limit(gen, budget)

    def output_reasoning_tokens(self, gen) -> int:
        count = getattr(gen, "reasoning_count", None)  # a plain call's: the server's count (plain.py)
        return count if count is not None else super().output_reasoning_tokens(gen)

    def decode(self, tokens) -> str:
        return "".join(tokens)

    def answer_text(self, ids, kind: str) -> str:
        """The answer in the server's token strings (a reasoning call: what follows `</think>`)."""
        text = "".join(ids)
        if kind == "reason":
            return clean_text(text.split(THINK_CLOSE, 1)[1]) if THINK_CLOSE in text else ""
        return clean_text(text)

    def clean_answer(self, ids) -> str:
        """The answer of a direct call's token strings (a streamed plain reply, serving/plain_stream.py)."""
        return clean_text("".join(ids))

    def split_reasoning(self, ids):
        """(reasoning tokens, reasoning text, answer or None while reasoning) of a reasoning call's token strings."""
        ids, text = list(ids), "".join(ids)
        close = self.prompts.answer_marker if self.style == "never" else THINK_CLOSE
        if close in text:
            head, tail = text.split(close, 1)
            return ids[: ids.index(close)] if close in ids else ids, head.replace(THINK_OPEN, ""), clean_text(tail)
        return ids, text.replace(THINK_OPEN, ""), None

    def reasoning_token_count(self, ids) -> int:
        return ids.index(THINK_CLOSE) if THINK_CLOSE in ids else len(ids)

    def start_sample(self, request) -> None:
        """Name this sample's prefix-cache namespace for a measured run (`measurement_salt`)."""
        request.__dict__.setdefault("_measure", f"routedvlm-{uuid.uuid4().hex[:16]}")

    # ----- one request ---------------------------------------------------------------------------------------
    def chat(self, request, question: str, *, thinking: bool, max_tokens: int, min_tokens: int = 0,
             partial: str | None = None, stage: str = "", salt: str | None = None):
        """POST one chat completion for `request` with `question` as the last user text: (Generation, reply).
        salt: vLLM `cache_salt` (prefix-cache namespace); default: the request's measurement salt for `stage`."""
        messages = openai_messages(request, request.messages(question))
        body = {"model": self.model_id, "messages": messages, "max_tokens": max_tokens, "temperature": 0,
                "logprobs": True, "top_logprobs": self.top_logprobs, "skip_special_tokens": False}
        sample = sampling.current()  # a visible answer of a request that samples: its parameters go to the server
        if sample is not None:
            body.update(sampling.http_fields(sample))
        salt = salt if salt is not None else measurement_salt(request, stage)
        if salt is not None:
            body["cache_salt"] = salt
        if min_tokens:
            body["min_tokens"] = min(min_tokens, max_tokens)
        if self.style == "hybrid":
            body["chat_template_kwargs"] = {"enable_thinking": thinking}
        if self.style == "always" and not thinking and partial is None:
            partial = THINK_OPEN + "\n\n" + THINK_CLOSE + "\n\n"
        if partial is not None:
            messages.append({"role": "assistant", "content": partial})
            body.update(continue_final_message=True, add_generation_prompt=False)
        from routedvlm.inference.streaming import current_streamer

        streamer = current_streamer()  # a streamed request's answer call: forward the server's tokens as they come
        what, headers, t0 = f"{stage or 'chat'} ({self.model_id})", session_headers(request), time.perf_counter()
        if streamer is not None:
            resp = self.client.stream(body, streamer.feed, what=what, headers=headers)
        else:
            resp = self.client.create(body, what=what, headers=headers)
        return generation(resp, (time.perf_counter() - t0) * 1000), resp

    # ----- ModelSide stages: one request each; the server caches prefixes, so `cache`/`inputs` are not used ----------
    def run_direct(self, side: str, request, cfg, *, cache=None, upcoming=(), inputs=None):
        gen, resp = self.chat(request, request.question, thinking=False, max_tokens=cfg.max_direct_tokens,
                              min_tokens=cfg.min_new_tokens, stage=f"{side}_direct")
        answer = direct_text(message(resp), logprob_tokens(resp))
        return gen, answer, [remote_record(f"{side}_direct", side, self, self.mode_name("direct"), gen, resp)]

    def run_reasoning(self, side: str, request, cfg, max_tokens: int, *, cache=None, upcoming=(),
                      inputs=None) -> ReasoningRun:
        vlm = self.reasoning_side()
        question = vlm.question_for(request.question, "reason")
        gen, resp = vlm.chat(request, question, thinking=True, max_tokens=max_tokens,
                             min_tokens=min(cfg.min_reason_tokens, max_tokens), stage=f"{side}_reason")
        reasoning, answer = vlm._split(message(resp), logprob_tokens(resp))
        choice = resp["choices"][0]
        tokens = reasoning_tokens(gen.token_ids, reasoning, thinking=vlm.style != "never",
                                  stopped=choice.get("finish_reason") == "stop",
                                  has_logprobs=bool((choice.get("logprobs") or {}).get("content")))
        rec = remote_record(f"{side}_reason", side, vlm, vlm.mode_name("reason"), gen, resp, reasoning_tokens=len(tokens))
        run = ReasoningRun(vlm, side, gen, None, tokens, reasoning, answer, [rec])
        run._request = request
        return run

    def _split(self, msg: dict, tokens: list) -> tuple[str, str | None]:
        """(reasoning, answer or None) of a reasoning-mode reply."""
        if self.style == "never":
            text = msg.get("content") or ""
            marker = self.prompts.answer_marker
            return (text.split(marker, 1)[0], clean_text(text.split(marker, 1)[1])) if marker in text else (text, None)
        return split_reasoning(msg, tokens)

    def finish_answer(self, run: ReasoningRun, cfg) -> ReasoningRun:
        """Close a reasoning run that hit its limit and ask for the answer (vLLM `continue_final_message`)."""
        opener = "" if self.style == "never" else THINK_OPEN + "\n"
        request = run._request
        question = self.question_for(request.question, "reason")
        gen, resp = self.chat(request, question, thinking=True, max_tokens=cfg.max_direct_tokens,
                              min_tokens=cfg.min_new_tokens, partial=opener + run.reasoning_text + self.close_text(),
                              stage=f"{run.side}_reason_answer")
        run.answer, run.answer_gen = direct_text(message(resp), logprob_tokens(resp)), gen
        run.records.append(remote_record(f"{run.side}_reason_answer", run.side, self, self.mode_name("reason"), gen, resp))
        return run

    def prefix(self, alias: str, request, cfg):
        from .remote_prompt import RemotePrompt

        return RemotePrompt(self, request, cfg, alias)

    def answer_cold(self, alias: str, request, question: str, stage: str, cfg, *, salt: str | None = None,
                      max_tokens: int | None = None):
        """A direct answer to `question` about the request's image as model `alias` (a cold one-stage transfer): (gen,
        answer, record)."""
        limit = cfg.max_direct_tokens if max_tokens is None else max_tokens
        gen, resp = self.chat(request, question, thinking=False, max_tokens=limit,
                              min_tokens=min(cfg.min_new_tokens, limit), stage=stage, salt=salt)
        answer = direct_text(message(resp), logprob_tokens(resp))
        return gen, answer, remote_record(stage, alias, self, self.mode_name("direct"), gen, resp)


def remote_record(stage: str, side: str, vlm, mode: str, gen, resp: dict, **extra) -> dict:
    """A trace record of one HTTP call: `remote`, and `n_images` when no prompt token was cached (the server
    encoded the image) and `image_tokens` when the server reports them, `cache_report` False when the reply had no prompt-token details."""
    _, cached = usage_counts(resp)
    extra = {"remote": True, **extra}
    if image_tokens(resp):
        extra["image_tokens"] = image_tokens(resp)
    if not cached:
        extra["n_images"] = 1
    if cached is None:
        extra["cache_report"] = False
    return record(stage, side, vlm, mode, gen, **extra)


def load(spec: str, *, reasoner=None, **_local) -> OpenAIVLM:
    """The spec table's loader: the OpenAIVLM of '<base_url>#<model id>' (API key from $ROUTEDVLM_BACKEND_API_KEY);
    `reasoner`: another such spec (its own server) or a model id on the same server, serving the reasoning mode (a
    thinking-only model). Settings for local models (`device`, `dtype`, ...) do not apply to a served model."""
    from .remote import API_KEY_ENV, parse_remote

    url, model = parse_remote(spec)
    key = os.environ.get(API_KEY_ENV)
    if parse_remote(reasoner if isinstance(reasoner, str) else None) is not None:
        r_url, r_model = parse_remote(reasoner)
        reasoner = OpenAIVLM.connect(r_url, r_model, key, thinking="always")
    return OpenAIVLM.connect(url, model, key, reasoner=reasoner)


__all__ = ["OpenAIVLM", "clean_text", "measurement_salt", "remote_record", "session_headers"]
