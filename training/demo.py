"""`routedvlm demo` (interim): every strategy, an escalation and mutual verification on a tiny random VLM pair.

Builds a small and a large Qwen3-VL-architecture model with random weights (answers are noise; the point is
the mechanics and the per-stage trace), runs them on two generated images and prints a table per sample.
The toy world replaces this with trained models.
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
import time

EPILOG = "example: routedvlm demo --workdir /tmp/routedvlm-demo --arch qwen3_vl"
COLUMNS = ("stage", "model", "mode", "vision_ms", "prefill_ms", "prefill_tok", "cached_tok", "decode_ms", "decode_tok")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="routedvlm demo", description="Run every strategy on a tiny random VLM pair.",
                                epilog=EPILOG)
    p.add_argument("--workdir", type=pathlib.Path, default=None, help="where to build the tiny models (default: a temp dir)")
    p.add_argument("--arch", default="qwen3_vl", help="tiny model family: qwen3_vl, qwen2_vl, smolvlm, llava_onevision")
    p.add_argument("--selector", default="prefix", help="prefix, suffix or attention")
    p.add_argument("--keep-tokens", type=int, default=16, help="K for the escalation and mutual verification")
    return p


def _images():
    from PIL import Image, ImageDraw

    a = Image.new("RGB", (64, 64), "white")
    ImageDraw.Draw(a).rectangle([8, 8, 40, 40], fill="red")
    b = Image.new("RGB", (96, 48), "black")
    ImageDraw.Draw(b).ellipse([10, 5, 50, 40], fill="blue")
    return [(a, "What colour is the square?"), (b, "How many circles are there?")]


def _row(cells) -> str:
    return "  ".join(str(c)[:14].ljust(14) if i < 3 else str(c).rjust(11) for i, c in enumerate(cells))


def _print_result(label: str, res) -> None:
    print(f"\n[{label}] strategy={res.strategy} keep_tokens={res.keep_tokens} answer={res.answer!r}")
    print("  " + _row(COLUMNS))
    for r in res.trace:
        print("  " + _row([r["stage"], r["model"], r.get("mode", ""), f"{r['vision_ms']:.1f}", f"{r['prefill_ms']:.1f}",
                           r["prefill_tokens"], r["cached_tokens"], f"{r['decode_ms']:.1f}", r["decode_tokens"]]))


def run_demo(workdir: pathlib.Path, arch: str, selector: str, keep: int) -> None:
    from routedvlm.inference import VLM, CollaborativePipeline, MutualVerification, build_tiny_pair
    from routedvlm.router.strategies import default_strategies

    small_dir, large_dir = build_tiny_pair(workdir, arch=arch)
    pipe = CollaborativePipeline(VLM.from_pretrained(small_dir), VLM.from_pretrained(large_dir), selector=selector,
                                 k_grid=(8, 16, 32), min_new_tokens=3, max_direct_tokens=8, max_reason_tokens=48,
                                 min_reason_tokens=32)
    print(f"small: {small_dir}\nlarge: {large_dir}\nselector: {selector}  (random weights: answers are noise)")
    for i, (image, question) in enumerate(_images()):
        print(f"\n=== sample {i}: {question}")
        for sid in default_strategies(pipe.k_grid):
            _print_result(sid, pipe.run(image, question, sid))
        first = pipe.run(image, question, "large_direct")
        _print_result(f"escalate K={keep}", pipe.escalate(first, keep))
        _print_result("mutual verification", MutualVerification(pipe, check="small_direct", keep_tokens=keep).run(image, question))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    import logging

    logging.getLogger("transformers").setLevel(logging.ERROR)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    import torch

    torch.set_num_threads(1)  # tiny models: one thread is faster than contended ones
    start = time.perf_counter()
    if args.workdir is None:
        with tempfile.TemporaryDirectory(prefix="routedvlm-demo-") as tmp:
            run_demo(pathlib.Path(tmp), args.arch, args.selector, args.keep_tokens)
    else:
        run_demo(args.workdir, args.arch, args.selector, args.keep_tokens)
    print(f"\ndone in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
