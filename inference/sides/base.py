"""`ModelSide`: what the pipeline, the labeller, the profiler, `RoutedVLM` and `serve` ask of one model side.

A side is one model (small or large) in its direct and reasoning modes. `sides/local/side.py` (`VLM`, transformers
checkpoints in this process) and `sides/http/side.py` (`OpenAIVLM`, an OpenAI-compatible server) implement it;
nothing outside the implementations asks which kind a side is: callers use the methods and capability flags
below. Stage methods return the pipeline's types (`generation.Generation`, `stages.ReasoningRun`, trace records).
"""
from __future__ import annotations

import abc

from routedvlm.errors import ModeUnavailableError

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def continue_partial(text: str, partial: str | None) -> str:
    """A rendered prompt continued by an assistant `partial`; one starting with `<think>` replaces the template's own
    opening think tag."""
    if partial is None:
        return text
    if partial.startswith(THINK_OPEN):
        stripped = text.rstrip()
        text = stripped[: -len(THINK_OPEN)] if stripped.endswith(THINK_OPEN) else text
    return text + partial


class PromptPrefix(abc.ABC):
    """What `ModelSide.prefix` returns: one model's image+question prefix of one request, kept for continuations.
    Attributes: `request`, `direct_text` (the question as the direct answer sends it), `prefix_record` (the trace
    record of the prefix), `side` (the alias it answers as)."""

    @abc.abstractmethod
    def answer(self, text: str, stage: str):
        """A direct answer continuing the prefix with `text` (the question, or a transfer question): (gen, answer,
        record of `stage`)."""

    @abc.abstractmethod
    def transfer_text(self, reasoning: str) -> str:
        """The transfer question carrying kept `reasoning` tokens."""

    def attention_scores(self, reasoning: str):
        """(token ids, attention score per token, record) of `reasoning` read by this model (the attention
        selector); unavailable where the side returns no attention weights."""
        raise ModeUnavailableError("This side returns no attention weights; use the prefix or suffix selector.")


class ModelSide(abc.ABC):
    """One side of the pipeline. Attributes every side sets: `name` (checkpoint path, or '<url>#<model id>'),
    `style` ("hybrid", "always" or "never": how the side switches thinking), `reasoner` (a side serving the
    reasoning mode, or None), `prompts` (PromptConfig), `reason_prompt` (whether a side without a thinking mode may
    reason from a prompt)."""

    #: the spec table's kind of this side (`sides/kinds.py`: "local", "http", "vllm"); its declared capabilities are
    #: the defaults of the flags below
    kind: str = "local"
    #: holds per-call model state (KV caches, rope offsets, a tokenizer that is not thread-safe): calls to it must
    #: be serialised (RoutedVLM's lock, the labeller's one-sample-at-a-time), and measured latencies are standalone.
    stateful: bool = True
    #: shares prefixes in this process: `prompt_cache` returns a per-sample cache (a local model's KV cache), so a
    #: sample's calls must follow one another (no overlapped calls)
    shares_prefixes: bool = False
    #: can capture decoder hidden states during its calls (the self-probe router needs them).
    returns_hidden_states: bool = False
    #: in a measured run (the labeller), also time one-stage transfers cold (read by HTTP sides, whose server may
    #: otherwise answer from its prefix cache; a side that measures every call cold ignores it).
    measure_cold: bool = True
    #: latencies are priced from token counts (the labeller's --cost): send no request that exists only to measure
    #: (no cold repeats, and no seed of a two-stage measurement's cache namespace where the side can count from token
    #: ids what an escalation reuses: `sides/vllm/engine_prompt.py`).
    priced: bool = False

    # ----- lifecycle ----------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Acquire what the side's calls need (an engine, its processes) now rather than on the first call, so that a
        side that cannot start fails before any work is handed to it. Default: nothing to start. Idempotent."""

    def close(self) -> None:
        """Release what `start` (or the first call) acquired: engine processes, GPU memory, threads. Default: nothing
        to release. Idempotent; a later call may start the side again."""

    # ----- identity and modes (shared) --------------------------------------------------------------------------
    @property
    @abc.abstractmethod
    def device(self):
        """Where calls run: two sides on different devices run their stage-one calls concurrently."""

    @property
    def placement(self):
        """(device, dtype) of this side's local weights, where a module reading its states (the LoRA probe) runs;
        None for a side without local weights (a served model)."""
        return None

    def rope_state(self):
        """A copy of the rotary-position offsets of the last prefill, for a reader continuing this side's KV cache;
        None when the side has none to give."""
        return None

    def set_rope_state(self, rope) -> None:
        """Restore offsets saved by `rope_state` before continuing that prefill's cache (default: nothing to do)."""

    @abc.abstractmethod
    def describe(self) -> dict:
        """What the labels metadata records about this side: `name`, `dtype`, `device`, `weights` (a local folder or
        hub id whose revision identifies the weights, or None), `checkpoint` (the folder or hub id this process
        loaded, recorded portably with its hashes; None for a served model), plus what the implementation adds
        (server, model id)."""

    def reasoning_side(self) -> "ModelSide":
        """The side that serves the reasoning mode: the reasoner if given, else this one."""
        side = self.reasoner or self
        if side.style == "never" and not side.reason_prompt:
            raise ModeUnavailableError(
                f"{self.name!r} has no reasoning mode: its chat template has no thinking mode, no `reasoner` "
                "checkpoint was given and reason_prompt=False. Pass reasoner=<a thinking checkpoint> or "
                "reason_prompt=True, or choose a strategy that does not need this side to reason."
            )
        return side

    def mode_name(self, mode: str) -> str:
        """How this side serves `mode` ("direct"/"reason"): "direct", "no_think", "think" or "prompt"."""
        if mode == "direct":
            return "direct" if self.style == "never" else "no_think"
        return "prompt" if self.style == "never" else "think"

    def question_for(self, question: str, mode: str) -> str:
        return self.prompts.reason_question(question) if mode == "reason" and self.style == "never" else question

    def close_text(self) -> str:
        """Text that ends reasoning and asks for the answer, for a reasoning run that hit its token limit."""
        return "\n" + THINK_CLOSE + "\n\n" if self.style != "never" else "\n" + self.prompts.answer_marker

    # ----- stages ------------------------------------------------------------------------------------------------
    @abc.abstractmethod
    def run_direct(self, side: str, request, cfg, *, cache=None, upcoming=(), inputs=None):
        """A short answer in direct mode: (Generation, answer, trace records). `side`: the model's alias, "small"/"large"
        for a pair (the records' `model`); cache/upcoming/inputs: this side's `prompt_cache` and prepared inputs (ignored when it has none)."""

    @abc.abstractmethod
    def run_reasoning(self, side: str, request, cfg, max_tokens: int, *, cache=None, upcoming=(), inputs=None):
        """Reason for at most `max_tokens` tokens with `reasoning_side()`: a `stages.ReasoningRun`."""

    @abc.abstractmethod
    def finish_answer(self, run, cfg):
        """Close a reasoning run (of this side) that stopped inside its reasoning and decode its answer."""

    @abc.abstractmethod
    def answer_cold(self, alias: str, request, question: str, stage: str, cfg):
        """A cold direct answer of the model named `alias` (the record's `model`) to `question` about the request's
        image (a one-stage transfer): (gen, answer, record)."""

    @abc.abstractmethod
    def prefix(self, alias: str, request, cfg):
        """The request's image+question prefix of the model named `alias`, kept for its direct answer and the
        continuations (two-stage decoding, `escalate`): a `PromptPrefix` (records `<alias>_prefix`,
        `<alias>_direct`, `<alias>_transfer`)."""

    @abc.abstractmethod
    def complete(self, request, mode: str, *, max_tokens: int, min_tokens: int = 0, partial: str | None = None,
                 check_context=None):
        """One plain completion in `mode` ("direct"/"reason") continuing an optional assistant `partial`
        (`routedvlm serve`'s plain models): a Generation. check_context(prompt_tokens) is called before decoding."""

    def complete_text(self, prompt: str, *, max_tokens: int, min_tokens: int = 0, check_context=None):
        """A raw continuation of `prompt` (no chat template; serve's /v1/completions): (Generation, text)."""
        raise ModeUnavailableError(f"The model {self.name!r} cannot continue a raw prompt here; use chat completions.")

    # ----- reading outputs ----------------------------------------------------------------------------------------
    @abc.abstractmethod
    def decode(self, ids) -> str:
        """The text of output tokens (token ids, or token strings for an HTTP side)."""

    @abc.abstractmethod
    def answer_text(self, ids, kind: str) -> str:
        """The answer text of a call's output tokens: `kind` "direct" (the whole output) or "reason" (what follows the
        think block; "" while still reasoning)."""

    @abc.abstractmethod
    def reasoning_token_count(self, ids) -> int:
        """How many of a reasoning call's output tokens are reasoning."""

    def reasoning_prefix(self, ids) -> int:
        """How many leading output tokens are a think block through its (last) closing tag; 0 when none closes.
        Default: token strings (an HTTP side)."""
        ids = list(ids)
        return len(ids) - ids[::-1].index(THINK_CLOSE) if THINK_CLOSE in ids else 0

    def eos_ids(self) -> list:
        """End-of-sequence token ids (empty when the side reports stops another way)."""
        return []

    def output_reasoning_tokens(self, gen) -> int:
        """How many of a call's output tokens are reasoning (`reasoning_token_count` of its tokens)."""
        return self.reasoning_token_count(gen.token_ids)

    def hit_limit(self, gen, budget: int) -> bool:
        """Whether a call stopped at its token budget rather than at an end of sequence."""
        return bool(gen.token_ids) and len(gen.token_ids) >= budget

    def capture_hidden(self, layers) -> None:
        """From now on, capture the outputs of decoder `layers` in every call (`Generation.hidden`); only sides with
        `returns_hidden_states`."""
        raise ModeUnavailableError(f"{self.name!r} returns no hidden states; the self-probe router needs a side "
                                   "that does (a local model).")

    def context_length(self) -> int | None:
        """Prompt + output tokens the side accepts (None: unknown)."""
        return None

    def count_prompt_tokens(self, request) -> int | None:
        """Tokens of `request`'s direct-mode prompt (chat template applied, image tokens expanded), counted before
        any model call; None when the side cannot count them here (a server checks its own)."""
        return None

    def special_tokens(self) -> list[str]:
        """The special tokens' spellings in this side's tokenizer (serve keeps client text from spelling them)."""
        return []

    # ----- sharing work within one sample --------------------------------------------------------------------------
    def prompt_cache(self, side: str):
        """A per-sample `PromptCache` for `run_many`, or None when the side cannot share prefixes in-process (a side
        that returns one declares `shares_prefixes`)."""
        return None

    def start_sample(self, request) -> None:
        """Called once per `run_many` sample before any call (an HTTP side names the sample's cache namespace)."""
