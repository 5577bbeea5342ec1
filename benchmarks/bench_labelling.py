"""Labelling with shared work (`run_many`) vs every strategy run on its own (`run` per strategy), side by side.

Builds the tiny random Qwen3-VL pair (`build_tiny_pair`: small hidden 64 / 2 layers, large hidden 128 / 3 layers),
lets their image processors take `--image-px` images (512 px -> 256 image tokens per image, like a chart or a photo
at a real VLM's resolution; the builders' default is 64 px -> 4 tokens), and labels the same samples both ways with
every strategy of the default K grid (16..256 + transfer_all; reasoning forced to `--reason-tokens` tokens with
`min_reason_tokens` so it really reaches K = 256). Per sample the two ways run back to back (order alternating) and
must give the same answers. Reported: prompt tokens prefilled (image tokens included, cached ones not; `run_many`
prefills each kept reasoning token once, as transfers branch at each K), by stage for `run_many`, and wall time,
with their ratios.

    .venv/bin/python benchmarks/bench_labelling.py --samples 3 --threads 1
"""
from __future__ import annotations

import argparse
import json
import pathlib
import tempfile
import time


def _args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--samples", type=int, default=3, help="samples labelled each way (after one warm-up sample)")
    p.add_argument("--image-px", type=int, default=512, help="image side in pixels (512 -> 256 image tokens)")
    p.add_argument("--reason-tokens", type=int, default=320, help="reasoning length (forced); must exceed the largest K")
    p.add_argument("--answer-tokens", type=int, default=4, help="short-answer length (forced)")
    p.add_argument("--k-grid", default="16,32,64,128,256", help="K values of transfer_<K>")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--json", default=None, help="also write the numbers to this JSON file")
    return p.parse_args(argv)


def _allow_image_px(model_dir: pathlib.Path, px: int) -> None:
    path = model_dir / "preprocessor_config.json"
    cfg = json.loads(path.read_text())
    cfg["size"]["longest_edge"] = px * px
    path.write_text(json.dumps(cfg, indent=2))


def shared_prefill_by_stage(results: dict) -> dict:
    """{stage: prompt tokens `run_many` prefilled}. A record reused in several traces carries `shared` and the
    `call` id of the model call it measured (a truncated copy keeps it): each call is counted once."""
    calls, out = {}, {}
    for res in results.values():
        for r in res.trace:
            key = r.get("call") if r.get("shared") else None
            if key is None:
                out[r["stage"]] = out.get(r["stage"], 0) + int(r["prefill_tokens"])
            else:
                calls[key] = (r["stage"], max(int(r["prefill_tokens"]), calls.get(key, ("", 0))[1]))
    for stage, tokens in calls.values():
        out[stage] = out.get(stage, 0) + tokens
    return out


def _one_sample(pipe, image, question, strategies, shared_first: bool) -> dict:
    def shared():
        t0 = time.perf_counter()
        res = pipe.run_many(image, question, strategies)
        return res, time.perf_counter() - t0

    def alone():
        t0 = time.perf_counter()
        res = {s: pipe.run(image, question, s) for s in strategies}
        return res, time.perf_counter() - t0

    first, second = (shared, alone) if shared_first else (alone, shared)
    a, b = first(), second()
    (sh, sh_s), (al, al_s) = (a, b) if shared_first else (b, a)
    return {
        "shared_s": sh_s, "alone_s": al_s, "shared_by_stage": shared_prefill_by_stage(sh),
        "alone_prefill": sum(int(r["prefill_tokens"]) for res in al.values() for r in res.trace),
        "same_answers": all(sh[s].answer == al[s].answer for s in strategies),
    }


def main(argv=None) -> dict:
    args = _args(argv)
    import torch
    from PIL import Image
    from transformers.utils import logging as hf_logging

    from routedvlm.inference import VLM, CollaborativePipeline, build_tiny_pair
    from routedvlm.inference.inputs import make_request
    from routedvlm.router.strategies import default_strategies, parse_k_grid

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    k_grid = parse_k_grid(args.k_grid)
    strategies = default_strategies(k_grid)
    with tempfile.TemporaryDirectory() as tmp:
        small, large = build_tiny_pair(tmp)
        for folder in (small, large):
            _allow_image_px(folder, args.image_px)
        pipe = CollaborativePipeline(
            VLM.from_pretrained(small), VLM.from_pretrained(large), k_grid=k_grid, max_direct_tokens=args.answer_tokens,
            min_new_tokens=args.answer_tokens, max_reason_tokens=args.reason_tokens, min_reason_tokens=args.reason_tokens)
    rows = []
    for i in range(args.samples + 1):  # sample 0 is the warm-up
        image = Image.new("RGB", (args.image_px, args.image_px), (40 * i % 256, 120, 200 - 30 * i % 200))
        question = f"Chart {i}: what is the sum of the red bars times the number of blue bars?"
        row = _one_sample(pipe, image, question, strategies, shared_first=i % 2 == 0)
        text = pipe.large.render(make_request(image, question).messages(), "direct")
        row["image_tokens"] = int((pipe.large.encode(image, text)["input_ids"] == pipe.large.processor.image_token_id).sum())
        rows.append(row)
    rows = rows[1:]
    out = {
        "models": "tiny qwen3_vl pair (random weights)", "strategies": strategies, "samples": len(rows),
        "image_tokens": rows[0]["image_tokens"], "reason_tokens": args.reason_tokens, "threads": args.threads,
        "same_answers": all(r["same_answers"] for r in rows),
        "prefill_tokens_shared": sum(sum(r["shared_by_stage"].values()) for r in rows),
        "prefill_tokens_alone": sum(r["alone_prefill"] for r in rows),
        "wall_s_shared": round(sum(r["shared_s"] for r in rows), 2), "wall_s_alone": round(sum(r["alone_s"] for r in rows), 2),
    }
    stages = rows[0]["shared_by_stage"]
    out["shared_prefill_by_stage"] = {k: sum(r["shared_by_stage"].get(k, 0) for r in rows) for k in stages}
    out["prefill_ratio"] = round(out["prefill_tokens_alone"] / out["prefill_tokens_shared"], 2)
    out["wall_ratio"] = round(out["wall_s_alone"] / out["wall_s_shared"], 2)
    for key, value in out.items():
        print(f"{key:24s} {value}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
