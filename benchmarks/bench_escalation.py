"""Escalation with prompt-cache reuse vs a cold one-stage transfer: the large model's second stage, side by side.

Default model: the mid-size tiny VLM (Qwen3-VL architecture, hidden 512, 4 layers, 256 image tokens, random
weights); `--shape qwen3-vl-8b` (or any shape / config.json) runs it at real sizes with random weights. Answers
`large_direct` once (caching the image+question prefix), then times the second stage both ways on the same
transfer prompt (K kept reasoning tokens): reuse (continue from a copy of the cache: only kept tokens + template
suffix are prefilled) and cold (processor + vision encoder + full prefill). Prints prefill tokens, median wall
times and the ratio (`routedvlm.inference.profiling.escalation`).

    .venv/bin/python benchmarks/bench_escalation.py --repeats 7 --threads 1
    .venv/bin/python benchmarks/bench_escalation.py --shape qwen3-vl-8b --device cuda --image-size 448
"""
from __future__ import annotations

import argparse
import json
import tempfile


def _args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", default="mid", help="tiny model size (mid = hidden 512, 4 layers, 256 image tokens)")
    p.add_argument("--shape", default=None, help="a model shape instead (qwen3-vl-2b, -4b, -8b or a config.json)")
    p.add_argument("--device", default="cpu", help="torch device (default cpu)")
    p.add_argument("--dtype", default=None, help="dtype of a --shape (default: its published dtype, bfloat16)")
    p.add_argument("--image-size", type=int, default=512, help="side of the square test image in pixels")
    p.add_argument("--keep-tokens", type=int, default=32, help="K kept reasoning tokens appended at escalation")
    p.add_argument("--answer-tokens", type=int, default=8, help="tokens decoded in the second stage (forced)")
    p.add_argument("--repeats", type=int, default=7, help="timed repetitions per way (median reported)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--json", default=None, help="also write the numbers to this JSON file")
    return p.parse_args(argv)


def _vlm(args):
    from routedvlm.inference import VLM, build_tiny_vlm

    if args.shape:
        from routedvlm.inference.profiling.shapes import shape_vlm

        return shape_vlm(args.shape, args.device, args.dtype)
    with tempfile.TemporaryDirectory() as tmp:
        return VLM.from_pretrained(build_tiny_vlm("qwen3_vl", tmp, seed=0, size=args.size), device=args.device)


def main(argv=None) -> dict:
    args = _args(argv)
    import torch
    from PIL import Image
    from transformers.utils import logging as hf_logging

    from routedvlm.inference.profiling.escalation import measure_escalation

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    vlm = _vlm(args)
    image = Image.new("RGB", (args.image_size, args.image_size), (180, 60, 60))
    out = measure_escalation(vlm, image, keep_tokens=args.keep_tokens, answer_tokens=args.answer_tokens,
                             repeats=args.repeats)
    out["model"] = args.shape or f"qwen3_vl {args.size}"
    out["threads"] = args.threads
    for key, value in out.items():
        print(f"{key:34s} {value}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2)
    return out


if __name__ == "__main__":
    main()
