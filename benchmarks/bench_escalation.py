"""Escalation with prompt-cache reuse vs a cold one-stage transfer: the large model's second stage, side by side.

Builds the mid-size tiny VLM (Qwen3-VL architecture, hidden 512, 4 layers, 256 image tokens, random
weights), answers `large_direct` once (caching the image+question prefix), then times the second stage
both ways on the same transfer prompt (K kept reasoning tokens): reuse (continue from a copy of the
cache: only kept tokens + template suffix are prefilled) and cold (processor + vision encoder + full
prefill). Checks the two give the same tokens and prints prefill tokens, median wall times and the ratio.

    .venv/bin/python benchmarks/bench_escalation.py --repeats 7 --threads 1
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time


def _args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", default="mid", help="tiny model size (mid = hidden 512, 4 layers, 256 image tokens)")
    p.add_argument("--keep-tokens", type=int, default=32, help="K kept reasoning tokens appended at escalation")
    p.add_argument("--answer-tokens", type=int, default=8, help="tokens decoded in the second stage (forced)")
    p.add_argument("--repeats", type=int, default=7, help="timed repetitions per way (median reported)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--json", default=None, help="also write the numbers to this JSON file")
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = _args(argv)
    import torch
    from PIL import Image
    from transformers.utils import logging as hf_logging

    from routedvlm.inference import VLM, PipelineConfig, build_tiny_vlm
    from routedvlm.inference.generation import timed_generate
    from routedvlm.inference.inputs import make_request
    from routedvlm.inference.stages import LargePrompt

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        vlm = VLM.from_pretrained(build_tiny_vlm("qwen3_vl", tmp, seed=0, size=args.size))
    cfg = PipelineConfig(max_direct_tokens=args.answer_tokens, min_new_tokens=args.answer_tokens)
    image = Image.new("RGB", (512, 512), (180, 60, 60))
    req = make_request(image, "How many red bars are taller than the blue one? Answer with a number.")
    kept = "".join("abcdefghij"[i % 10] for i in range(args.keep_tokens))  # byte-level: one token per char
    lp = LargePrompt(vlm, req, cfg)  # stage one's prefix prefill (image + question), cached once
    text = lp.transfer_text(kept)
    reuse_ms, cold_ms, reuse, cold = [], [], None, None
    for _ in range(args.repeats + 1):  # first round is warm-up
        t0 = time.perf_counter()
        reuse, _, _ = lp.answer(text, "escalate")
        reuse_ms.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        cold = timed_generate(vlm.model, vlm.encode(image, text), max_new_tokens=cfg.max_direct_tokens,
                              min_new_tokens=cfg.min_new_tokens)
        cold_ms.append((time.perf_counter() - t0) * 1000)
    out = _report(args, vlm, lp, reuse, cold, reuse_ms[1:], cold_ms[1:])
    out["speedup_cold_over_reuse"] = round(out["cold_ms_median"] / out["reuse_ms_median"], 2)
    for key, value in out.items():
        print(f"{key:34s} {value}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2)
    return out


def _report(args, vlm, lp, reuse, cold, reuse_ms, cold_ms) -> dict:
    image_tokens = int((lp.direct_inputs["input_ids"] == vlm.processor.image_token_id).sum())
    return {
        "model": f"qwen3_vl {args.size}", "image_tokens": image_tokens,
        "keep_tokens": args.keep_tokens, "answer_tokens": args.answer_tokens, "threads": args.threads,
        "cached_prefix_tokens": lp.prefix.length, "same_tokens": reuse.token_ids == cold.token_ids,
        "reuse_prefill_tokens": reuse.prefill_tokens, "cold_prefill_tokens": cold.prefill_tokens,
        "hint_and_template_suffix_tokens": reuse.prefill_tokens - args.keep_tokens,
        "reuse_ms_median": round(statistics.median(reuse_ms), 1), "cold_ms_median": round(statistics.median(cold_ms), 1),
        "reuse_prefill_ms_last": round(reuse.prefill_ms, 1), "cold_vision_ms_last": round(cold.vision_ms, 1),
        "cold_prefill_ms_last": round(cold.prefill_ms, 1), "decode_ms_last": [round(reuse.decode_ms, 1), round(cold.decode_ms, 1)],
    }


if __name__ == "__main__":
    main()
