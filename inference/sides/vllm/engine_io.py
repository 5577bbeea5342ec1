"""What goes into an in-process `vllm.LLM` (its arguments) and what comes out (a `Generation` from a `RequestOutput`),
for `sides/vllm/side.py`. vLLM itself is not imported here.
"""
from __future__ import annotations

import json
import math
import os

from routedvlm.errors import ConfigError

from ..results import Generation

ENGINE_ARGS_ENV = "ROUTEDVLM_VLLM_ENGINE_ARGS"
ENGINE_DEFAULTS = {"enable_prefix_caching": True, "disable_log_stats": False,
                   "limit_mm_per_prompt": {"image": 1, "video": 0}}
# the CPU build: KV blocks of 32 tokens (it refuses 16; prefix caching reuses whole blocks), no graph capture,
# float32 (answers equal the local float32 side's)
CPU_DEFAULTS = {"block_size": 32, "enforce_eager": True, "dtype": "float32"}


def resolve_engine_args(extra: dict | None = None) -> dict:
    """The keyword arguments of `vllm.LLM` (besides `model`): ENGINE_DEFAULTS, on a CPU also CPU_DEFAULTS, then
    $ROUTEDVLM_VLLM_ENGINE_ARGS (a JSON object), then `extra`."""
    args = dict(ENGINE_DEFAULTS)
    if os.environ.get("VLLM_TARGET_DEVICE", "").lower() == "cpu" or not _has_cuda():
        args.update(CPU_DEFAULTS)
    text = os.environ.get(ENGINE_ARGS_ENV)
    if text:
        try:
            env = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"${ENGINE_ARGS_ENV} must be a JSON object of vllm.LLM arguments, e.g. "
                              f"'{{\"max_num_seqs\": 64}}'. Got {text!r} ({exc}).") from None
        if not isinstance(env, dict):
            raise ConfigError(f"${ENGINE_ARGS_ENV} must be a JSON object of vllm.LLM arguments. Got {text!r}.")
        args.update(env)
    args.update(extra or {})
    return args


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def generation(out, wall_ms: float) -> Generation:
    """A Generation from one RequestOutput: output token ids and their logprobs, the first token's entropy from its top
    logprobs, prompt tokens less the engine's `num_cached_tokens`, and the engine's times (scheduled -> first token =
    prefill, first -> last token = decode, queueing left out; `wall_ms` as decode when the output has no metrics), per
    token spread linearly."""
    comp = out.outputs[0]
    ids = list(comp.token_ids)
    steps = list(comp.logprobs or [])
    logprobs = [float(step[t].logprob) for step, t in zip(steps, ids) if step and t in step]
    first = _entropy(steps[0]) if steps and steps[0] else float("nan")
    prompt, cached = len(out.prompt_token_ids or []), int(getattr(out, "num_cached_tokens", 0) or 0)
    m = getattr(out, "metrics", None)
    if m is not None and getattr(m, "first_token_ts", 0) and getattr(m, "scheduled_ts", 0):
        prefill = max(m.first_token_ts - m.scheduled_ts, 0.0) * 1000
        decode = max(m.last_token_ts - m.first_token_ts, 0.0) * 1000
    else:
        prefill, decode = 0.0, wall_ms
    n = len(ids)
    times = [decode * i / max(n - 1, 1) for i in range(n)]
    return Generation(ids, logprobs, first, times, 0.0, prefill, decode, max(prompt - cached, 0), cached)


def _entropy(step: dict) -> float:
    """Entropy (nats) of a token's distribution from its top logprobs, the rest of the mass as one outcome."""
    ps = [math.exp(lp.logprob) for lp in step.values() if math.isfinite(lp.logprob)]
    rest = max(0.0, 1.0 - sum(ps))
    return -sum(p * math.log(p) for p in ps if p > 0) - (rest * math.log(rest) if rest > 0 else 0.0)


def freeze_heap() -> None:
    """Move every object alive now (the engine just built, the models, the libraries) out of the cyclic garbage
    collector's scans, as vLLM's own engine core does after start-up: with an engine in the process, a full
    collection took ~0.9 s on the toy pair and stalled every sample in flight (one in about every other labelling
    of 128 samples). `VLLMEngine.close()` undoes it."""
    import gc

    gc.collect()
    gc.freeze()


def image_uuid(request) -> str:
    """A content key of the request's image (mode, size, pixels), computed once per request: sent as the prompt's
    `multi_modal_uuids`, the engine keys its multimodal caches and the image's prefix-cache blocks by it instead of
    hashing the pixels again for each of the sample's calls (8 per sample on the toy pair's grid)."""
    key = request.__dict__.get("_image_uuid")
    if key is None:
        import hashlib

        image = request.image
        digest = hashlib.blake2b(f"{image.mode}:{image.size}:".encode(), digest_size=16)
        digest.update(image.tobytes())
        key = request.__dict__["_image_uuid"] = f"routedvlm-image-{digest.hexdigest()}"
    return key
