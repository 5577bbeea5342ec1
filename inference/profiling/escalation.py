"""The large model's second stage, side by side: continuing its cached image+question prefix vs a cold call.

`measure_escalation(vlm, image)` answers `large_direct` once (caching the prefix, as the pipeline does), then times
the escalation both ways on the same transfer prompt (K kept reasoning tokens): reuse (continue from a copy of the
cache: only the kept tokens + the template suffix are prefilled) and cold (processor + vision encoder + full
prefill). Used by `benchmarks/bench_escalation.py` and `routedvlm profile --preset gpu-check` (real shapes).
"""
from __future__ import annotations

import statistics
import time

QUESTION = "How many red bars are taller than the blue one? Answer with a number."


def _kept_text(n: int) -> str:
    return "".join("abcdefghij"[i % 10] for i in range(n))  # byte-level tokenizers: one token per character


def measure_escalation(vlm, image, *, keep_tokens: int = 32, answer_tokens: int = 8, repeats: int = 7) -> dict:
    """Median wall ms of the second stage with prefix reuse and cold, after one unrecorded round; plus token counts.

    `same_tokens` compares the two answers (exact in float32; in bf16 the two prefill orders can round differently,
    so `first_logits_max_rel_diff` says how far the first answer logits are apart; `gpu_check.check_escalation`).
    """
    from ..sides.local.generation import timed_generate
    from ..inputs import make_request
    from ..pipeline_parts import PipelineConfig
    from .env import sync
    from ..sides.local.stages import CachedPrefix

    device = str(vlm.device)
    cfg = PipelineConfig(max_direct_tokens=answer_tokens, min_new_tokens=answer_tokens)
    req = make_request(image, QUESTION)
    lp = CachedPrefix(vlm, req, cfg, "large")  # stage one's prefix prefill (image + question), cached once
    text = lp.transfer_text(_kept_text(keep_tokens))
    reuse_ms, cold_ms, reuse, cold = [], [], None, None
    for _ in range(repeats + 1):  # the first round is a warm-up
        t0 = time.perf_counter()
        reuse, _, _ = lp.answer(text, "escalate")
        sync(device)
        reuse_ms.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        cold = timed_generate(vlm.model, vlm.encode(image, text), max_new_tokens=answer_tokens,
                              min_new_tokens=answer_tokens)
        sync(device)
        cold_ms.append((time.perf_counter() - t0) * 1000)
    return report(vlm, lp, reuse, cold, reuse_ms[1:], cold_ms[1:], keep_tokens, answer_tokens)


def report(vlm, lp, reuse, cold, reuse_ms, cold_ms, keep_tokens: int, answer_tokens: int) -> dict:
    image_tokens = int((lp.direct_inputs["input_ids"] == vlm.processor.image_token_id).sum())
    out = {
        "model": vlm.name, "dtype": str(vlm.model.dtype).removeprefix("torch."), "device": str(vlm.device),
        "image_tokens": image_tokens, "keep_tokens": keep_tokens, "answer_tokens": answer_tokens,
        "repeats": len(reuse_ms), "cached_prefix_tokens": lp.prefix.length,
        "same_tokens": reuse.token_ids == cold.token_ids, "first_logits_max_rel_diff": _rel_diff(reuse, cold),
        "reuse_prefill_tokens": reuse.prefill_tokens, "cold_prefill_tokens": cold.prefill_tokens,
        "hint_and_template_suffix_tokens": reuse.prefill_tokens - keep_tokens,
        "reuse_ms_median": round(statistics.median(reuse_ms), 1), "cold_ms_median": round(statistics.median(cold_ms), 1),
        "reuse_prefill_ms_last": round(reuse.prefill_ms, 1), "cold_vision_ms_last": round(cold.vision_ms, 1),
        "cold_prefill_ms_last": round(cold.prefill_ms, 1),
        "decode_ms_last": [round(reuse.decode_ms, 1), round(cold.decode_ms, 1)],
    }
    out["speedup_cold_over_reuse"] = round(out["cold_ms_median"] / out["reuse_ms_median"], 2)
    return out


def _rel_diff(a, b) -> float | None:
    """max |a - b| / max |b| over the finite first answer logits of two generations (1.0 when different entries are
    masked to -inf; None when either has none)."""
    import torch

    if a.first_logits is None or b.first_logits is None:
        return None
    fa, fb = torch.isfinite(a.first_logits), torch.isfinite(b.first_logits)
    if not bool((fa == fb).all()):
        return 1.0
    x, y = a.first_logits[fa], b.first_logits[fb]
    scale = float(y.abs().max()) if y.numel() else 1.0
    return round(float((x - y).abs().max()) / (scale or 1.0), 6) if y.numel() else 0.0
