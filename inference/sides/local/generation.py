"""Timed greedy generation with the vision encoder, prefill and decode measured separately.

`timed_generate` wraps `model.generate`: image features are computed first (timed as `vision_ms`) and
passed back in; a logits processor stamps the time of every step, so `prefill_ms` is the time to the
first logits and `token_times_ms[i]` the decode time (after prefill) at which token i was chosen.
`prefill_prefix` / `continue_from` cache a prompt prefix once and continue several suffixes from copies
of it, saving and restoring the Qwen-VL position offset (`model.model.rope_deltas`) per prefix.
"""
from __future__ import annotations

import contextlib
import copy
import inspect
import time
from dataclasses import dataclass, field

from ..results import Generation  # noqa: F401 - what timed_generate returns, kept importable from here
from .hidden import capture_of

_PIXEL_KEYS = ("pixel_values", "pixel_values_images")
_CLOCK = time.perf_counter  # what every time stamp here reads (see `clock`)
_LEAN = None  # None, or {"per_step_sync": bool} inside `lean` (see there)


def now() -> float:
    """The current time stamp in seconds from the active clock (wall clock unless `clock` swapped it)."""
    return _CLOCK()


@contextlib.contextmanager
def clock(fn):
    """Inside the block, time stamps come from `fn`: e.g. `time.process_time` (CPU seconds of this process), which
    on a shared, loaded CPU with one torch thread measures what an idle core would take. Not for CUDA timings."""
    global _CLOCK
    previous, _CLOCK = _CLOCK, fn
    try:
        yield
    finally:
        _CLOCK = previous


@contextlib.contextmanager
def lean(per_step_sync: bool = True):
    """Inside the block, `timed_generate` skips the per-step float32 log-softmax over the vocabulary
    (`token_logprobs` empty, `first_token_entropy` NaN; `first_logits` is still kept) and, with
    `per_step_sync=False`, synchronises a GPU only at the first token and at the end (prefill and total decode
    times stay exact; per-token times do not). For timing runs that never read the log-probabilities."""
    global _LEAN
    previous, _LEAN = _LEAN, {"per_step_sync": per_step_sync}
    try:
        yield
    finally:
        _LEAN = previous


class _StepRecorder:
    """A logits processor that records the time, the greedy log-probability and the first logits of each step."""

    def __init__(self, sync):
        self.sync = sync
        self.times, self.logprobs, self.first_logits, self.entropy = [], [], None, float("nan")
        self.lean, self.sampled, self.previous = _LEAN, False, None

    def __call__(self, input_ids, scores):
        import torch

        if self.sync is not None and (self.lean is None or self.lean["per_step_sync"] or not self.times):
            self.sync()
        self.times.append(now())
        if self.lean is not None:
            if self.first_logits is None:
                self.first_logits = scores.detach().float().clone()
            return scores
        logp = torch.log_softmax(scores.float(), dim=-1)
        if self.sampled:  # the previous step's pick is known now: its log-probability, not the step's maximum
            if self.previous is not None:
                self.logprobs.append(self.previous.gather(-1, input_ids[:, -1:]).flatten())
            self.previous = logp
        if self.first_logits is None:
            self.first_logits = scores.detach().float().clone()
            finite = torch.where(torch.isfinite(logp), logp, torch.zeros_like(logp))
            self.entropy = -(logp.exp() * finite).sum(-1)
        if not self.sampled:
            self.logprobs.append(logp.max(dim=-1).values)
        return scores

    def finish(self, ids: list) -> None:
        """After a sampled call: the log-probability of the last token picked."""
        if self.sampled and self.previous is not None and ids:
            self.logprobs.append(self.previous[:, int(ids[-1])].flatten())


def _sync_fn(model):
    import torch

    dev = next(model.parameters()).device
    return (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else None


def encode_images(model, inputs: dict):
    """Run the vision encoder alone: returns (inputs without pixels, mm_encoder_outputs or None, vision_ms)."""
    import torch

    if not any(k in inputs for k in _PIXEL_KEYS) or "mm_encoder_outputs" not in inspect.signature(model.forward).parameters:
        return dict(inputs), None, 0.0
    fn = model.base_model.get_image_features
    names = [k for k in inspect.signature(fn).parameters if k != "kwargs" and k in inputs]
    sync = _sync_fn(model)
    t0 = now()
    with torch.inference_mode():
        feats = fn(**{k: inputs[k] for k in names}, return_dict=True)
    if sync:
        sync()
    ms = (now() - t0) * 1000
    rest = {k: v for k, v in inputs.items() if k not in _PIXEL_KEYS}
    return rest, {"image": feats}, ms


def cache_kwarg(model) -> str:
    """The name of the KV-cache argument of `model`'s forward (and so of `generate`): `cache` in transformers 5.2x,
    `past_key_values` before (the version vLLM's CPU build pins, where the engine side's tests also run `VLM`)."""
    params = inspect.signature(type(model).forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def timed_generate(model, inputs: dict, *, max_new_tokens: int, min_new_tokens: int = 0, cache=None,
                   eos_token_id=None, features=None) -> Generation:
    """Greedy generation of up to `max_new_tokens` tokens from `inputs` (a processor output as a dict); a call
    writing a visible answer samples instead when the request's `sampling.Sampling` is active (sampling.py).

    `cache`: a cache already holding a prefix of `inputs["input_ids"]` (it is mutated: pass a copy to
    branch); only the uncached tail is prefilled. Without one, a fresh DynamicCache is used and returned
    in `Generation.cache`. `features`: `(mm_encoder_outputs, vision_ms)` of this image from `encode_images`,
    used instead of running the vision encoder again (vision_ms 0 when they are reused).
    """
    import torch
    from transformers import DynamicCache, LogitsProcessorList, StoppingCriteriaList

    from ... import deadline, sampling
    from ...streaming import current_streamer

    deadline.check()  # a request past its deadline (or a server shutting down) starts no model call

    cached = 0 if cache is None else cache.get_seq_length()
    if cache is None:
        cache = DynamicCache(config=model.config.get_text_config())
    vision_ms, mm = 0.0, None
    if cached == 0 and features is not None and features[0] is not None:
        inputs, (mm, vision_ms) = {k: v for k, v in inputs.items() if k not in _PIXEL_KEYS}, features
    elif cached == 0:
        inputs, mm, vision_ms = encode_images(model, inputs)
    else:
        inputs = {k: v for k, v in inputs.items() if k not in _PIXEL_KEYS}
    rec = _StepRecorder(_sync_fn(model))
    extra = {"mm_encoder_outputs": mm} if mm is not None else {}
    streamer = current_streamer()  # set only for a streamed request's final answer (streaming.py)
    if streamer is not None:
        extra["streamer"] = streamer
    if eos_token_id is not None:
        extra["eos_token_id"] = eos_token_id
    if deadline.criteria():
        extra["stopping_criteria"] = StoppingCriteriaList(deadline.criteria())  # raises at the next token past it
    n_in = inputs["input_ids"].shape[1]
    sample = sampling.current()  # set only for a call writing a visible answer of a request that samples
    decode = {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
    processors = [rec]
    if sample is not None:
        eos = extra.get("eos_token_id", model.generation_config.eos_token_id)
        kw, more = sampling.generate_kwargs(sample, n_in, [eos] if isinstance(eos, int) else list(eos or []),
                                            getattr(model, "_routedvlm_tokenizer", None))
        decode = {**decode, **kw}
        processors, rec.sampled = [*more, rec], True
    capture = capture_of(model)
    if capture is not None:
        capture.start()
    t0 = now()
    with torch.inference_mode(), sampling.seeded(sample, next(model.parameters()).device):
        out = model.generate(
            **inputs, **extra, **{cache_kwarg(model): cache}, max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens,
            **decode, logits_processor=LogitsProcessorList(processors), return_dict_in_generate=True,
        )
    if rec.lean is not None and rec.sync is not None:
        rec.sync()
    t_end = now()
    hidden = capture.finish() if capture is not None else None
    ids = out.sequences[0, n_in:].tolist()
    rec.finish(ids)
    first = rec.times[0] if rec.times else t_end
    logprobs = torch.stack(rec.logprobs).flatten().tolist()[: len(ids)] if rec.logprobs else []
    return Generation(
        token_ids=ids, token_logprobs=logprobs, first_token_entropy=float(rec.entropy),
        token_times_ms=[(t - first) * 1000 for t in rec.times[: len(ids)]], vision_ms=vision_ms,
        prefill_ms=(first - t0) * 1000, decode_ms=(t_end - first) * 1000, prefill_tokens=n_in - cached,
        cached_tokens=cached, first_logits=rec.first_logits, cache=cache, hidden=hidden,
    )


@dataclass
class PrefixState:
    """A cached prompt prefix of one model: token ids, the KV cache and the Qwen-VL rope offset it needs."""

    input_ids: object
    cache: object
    rope_deltas: object
    vision_ms: float
    prefill_ms: float

    @property
    def length(self) -> int:
        return int(self.input_ids.shape[1])


def rope_owner(model):
    """The submodule that holds the Qwen-VL rope offset (`rope_deltas`), or None for models without one."""
    inner = getattr(model, "model", None)
    return inner if inner is not None and hasattr(inner, "rope_deltas") else None


def prefill_prefix(model, inputs: dict, n_tokens: int) -> PrefixState:
    """Encode the image and prefill the first `n_tokens` prompt tokens once; returns the reusable state."""
    sliced = {k: (v[:, :n_tokens] if k in ("input_ids", "attention_mask", "mm_token_type_ids", "token_type_ids") else v)
              for k, v in inputs.items()}
    gen = timed_generate(model, sliced, max_new_tokens=1)
    owner = rope_owner(model)
    deltas = None if owner is None or owner.rope_deltas is None else owner.rope_deltas.clone()
    return PrefixState(sliced["input_ids"], gen.cache, deltas, gen.vision_ms, gen.prefill_ms)


def common_prefix_len(a, b) -> int:
    """Length of the longest common prefix of two token id sequences (lists or 1-row tensors)."""
    a = a[0].tolist() if hasattr(a, "dim") else list(a)
    b = b[0].tolist() if hasattr(b, "dim") else list(b)
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def continue_from(model, prefix: PrefixState, inputs: dict, *, max_new_tokens: int, min_new_tokens: int = 0,
                  restore_rope: bool = True, eos_token_id=None) -> Generation:
    """Generate from `inputs` (full prompt ids, no pixels needed) reusing a copy of the prefix cache.

    The prefix cache is cropped back if the prompt diverges inside it (at least one token is always
    prefilled). `restore_rope=False` exists only for the stale-state negative-control test.
    """
    n = min(common_prefix_len(prefix.input_ids, inputs["input_ids"]), inputs["input_ids"].shape[1] - 1)
    cache = copy.deepcopy(prefix.cache)
    if n < cache.get_seq_length():
        cache.crop(-(cache.get_seq_length() - n))
    owner = rope_owner(model)
    if restore_rope and owner is not None:
        owner.rope_deltas = None if prefix.rope_deltas is None else prefix.rope_deltas.clone()
    return timed_generate(model, inputs, cache=cache, max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens,
                          eos_token_id=eos_token_id)
