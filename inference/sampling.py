"""Sampling of the visible answer: a `Sampling` (vLLM's / OpenAI's sampling parameters) active for one request.

The router was trained and certified on greedy labels, so only the call that writes the visible answer samples:
`RoutedVLM.generate(..., sampling=)` makes a request's `Sampling` active (`active`), and the pipeline's final-answer
calls (marked by `streaming.answer_segment`) read it through `current()`; the stages a router reads before deciding
(a cascade's short answers, a transfer's kept reasoning, the features) stay greedy. A plain completion (serve's plain
models) samples its one call. Each side reads `current()` where it builds a call: the local side through
`generate_kwargs` (transformers' `generate`), the HTTP side by sending the fields (`http_fields`), the vLLM engine
side by building its `SamplingParams` (`engine_fields`). Nothing is active: greedy, as before.
"""
from __future__ import annotations

import contextlib
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field

_REQUEST: ContextVar = ContextVar("routedvlm_sampling", default=None)
_ANSWER: ContextVar = ContextVar("routedvlm_answer_call", default=False)


@dataclass(frozen=True)
class Sampling:
    """vLLM's sampling parameters with vLLM's defaults (temperature 1 with the others neutral is plain sampling;
    temperature 0 is greedy). `stop`: strings that end the answer (not included in it); `logit_bias`: token id ->
    bias added to its logit; `ignore_eos`: decode until `max_tokens`; `seed`: a reproducible sample."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    stop: tuple = ()
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: dict = field(default_factory=dict)
    ignore_eos: bool = False

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def neutral(self) -> bool:
        """Whether this changes nothing about a greedy call (greedy, no stop, no bias, no penalty, EOS honoured)."""
        return (self.greedy and not self.stop and not self.logit_bias and not self.ignore_eos
                and self.presence_penalty == 0 and self.frequency_penalty == 0 and self.repetition_penalty == 1)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["stop"] = list(self.stop)
        out["logit_bias"] = {str(k): v for k, v in self.logit_bias.items()}
        return out

    def with_seed(self, seed: int | None) -> "Sampling":
        from dataclasses import replace

        return replace(self, seed=seed)


@contextlib.contextmanager
def active(sampling: Sampling | None):
    """Within the block, the final-answer calls made in this context sample with `sampling` (None: greedy)."""
    token = _REQUEST.set(sampling)
    try:
        yield
    finally:
        _REQUEST.reset(token)


@contextlib.contextmanager
def answer_call():
    """Mark the calls in the block as writing the visible answer (they sample when a Sampling is active)."""
    token = _ANSWER.set(True)
    try:
        yield
    finally:
        _ANSWER.reset(token)


@contextlib.contextmanager
def plain(sampling: Sampling | None):
    """A plain completion: its one call samples with `sampling`."""
    with active(sampling), answer_call():
        yield


def current() -> Sampling | None:
    """The Sampling of a call made now: the request's, inside a final-answer call; else None (greedy)."""
    s = _REQUEST.get()
    return s if s is not None and _ANSWER.get() and not s.neutral else None


def http_fields(s: Sampling) -> dict:
    """The request fields of `s` for an OpenAI-compatible (vLLM) server."""
    out = {"temperature": s.temperature, "top_p": s.top_p}
    if s.top_k:
        out["top_k"] = s.top_k
    if s.min_p:
        out["min_p"] = s.min_p
    if s.seed is not None:
        out["seed"] = s.seed
    if s.stop:
        out["stop"] = list(s.stop)
    if s.presence_penalty:
        out["presence_penalty"] = s.presence_penalty
    if s.frequency_penalty:
        out["frequency_penalty"] = s.frequency_penalty
    if s.repetition_penalty != 1:
        out["repetition_penalty"] = s.repetition_penalty
    if s.logit_bias:
        out["logit_bias"] = {str(k): v for k, v in s.logit_bias.items()}
    if s.ignore_eos:
        out["ignore_eos"] = True
    return out


def engine_fields(s: Sampling) -> dict:
    """Keyword arguments of vLLM's `SamplingParams` for `s`."""
    out = {"temperature": s.temperature, "top_p": s.top_p, "top_k": s.top_k if s.top_k > 0 else -1, "min_p": s.min_p,
           "seed": s.seed, "presence_penalty": s.presence_penalty, "frequency_penalty": s.frequency_penalty,
           "repetition_penalty": s.repetition_penalty, "ignore_eos": s.ignore_eos}
    if s.stop:
        out["stop"] = list(s.stop)
    if s.logit_bias:
        out["logit_bias"] = {int(k): float(v) for k, v in s.logit_bias.items()}
    return out


class _Penalties:
    """A logits processor: OpenAI's presence / frequency penalties over the tokens generated so far, and logit_bias."""

    def __init__(self, s: Sampling, n_prompt: int):
        self.s, self.n_prompt = s, n_prompt
        self.bias = {int(k): float(v) for k, v in s.logit_bias.items()}

    def __call__(self, input_ids, scores):
        import torch

        scores = scores.clone()
        out = input_ids[:, self.n_prompt:]
        if out.shape[1] and (self.s.presence_penalty or self.s.frequency_penalty):
            counts = torch.zeros_like(scores).scatter_add_(1, out, torch.ones_like(out, dtype=scores.dtype))
            scores -= self.s.frequency_penalty * counts + self.s.presence_penalty * (counts > 0).to(scores.dtype)
        for tid, bias in self.bias.items():
            if 0 <= tid < scores.shape[-1]:
                scores[:, tid] += bias
        return scores


def generate_kwargs(s: Sampling, n_prompt: int, eos_ids, tokenizer) -> tuple[dict, list]:
    """(keyword arguments of transformers' `generate`, extra logits processors) for `s`; `n_prompt`: prompt length."""
    kw = {"do_sample": not s.greedy}
    if not s.greedy:
        kw.update(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k if s.top_k > 0 else None)
        if s.min_p:
            kw["min_p"] = s.min_p
    if s.repetition_penalty != 1:
        kw["repetition_penalty"] = s.repetition_penalty
    if s.stop and tokenizer is not None:
        kw.update(stop_strings=list(s.stop), tokenizer=tokenizer)
    if s.ignore_eos and eos_ids:
        kw["suppress_tokens"] = sorted(set(int(t) for t in eos_ids))
    extra = [_Penalties(s, n_prompt)] if (s.presence_penalty or s.frequency_penalty or s.logit_bias) else []
    return kw, extra


def cut_at_stop(text: str, s: Sampling | None) -> tuple[str, bool]:
    """(`text` up to its first stop string, whether one was found)."""
    if s is None or not s.stop:
        return text, False
    hits = [i for i in (text.find(stop) for stop in s.stop) if i >= 0]
    return (text[:min(hits)], True) if hits else (text, False)


@contextlib.contextmanager
def seeded(s: Sampling | None, device):
    """Torch's random state seeded with `s.seed` inside the block (and restored after); nothing without a seed."""
    if s is None or s.seed is None or s.greedy:
        yield
        return
    import torch

    devices = [device] if getattr(device, "type", "cpu") == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(int(s.seed))
        if devices:
            torch.cuda.manual_seed(int(s.seed))
        yield
