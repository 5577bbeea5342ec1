"""Quick check of the toy world's effects with plain transformers generate (greedy) on held-out samples.

Prompts are rendered exactly as the pipeline sends them: chat template with `enable_thinking`, image first, the
transfer question from `PromptConfig.transfer_question`. Accuracy is batched; latency is timed one sample at a time.
Example: python -m routedvlm.data.toyworld.quick_eval --ckpt data/toyworld/checkpoints --n 500
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np

from . import models as M
from .task import make_samples

TRANSFER_KS = (4, 8, 16, 32)


class Side:
    """One loaded checkpoint: model, tokenizer and PIL image processor, loaded the normal way."""

    def __init__(self, path):
        from transformers import AutoImageProcessor, AutoModelForImageTextToText, AutoTokenizer

        self.model = AutoModelForImageTextToText.from_pretrained(path).eval()
        self.tok = AutoTokenizer.from_pretrained(path)
        self.tok.padding_side = "left"
        self.ip = AutoImageProcessor.from_pretrained(path)

    def inputs(self, images, questions, thinking: bool):
        vis = self.ip(images, return_tensors="pt")
        n_img = int(vis["image_grid_thw"][0].prod()) // 4
        texts = [self.tok.apply_chat_template(M.messages(q), tokenize=False, add_generation_prompt=True,
                                              enable_thinking=thinking).replace("<|image_pad|>", "<|image_pad|>" * n_img)
                 for q in questions]
        enc = self.tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        enc["mm_token_type_ids"] = (enc["input_ids"] == self.tok.convert_tokens_to_ids("<|image_pad|>")).long()
        return {**enc, **vis}

    def generate(self, images, questions, thinking: bool, max_new_tokens: int) -> list[str]:
        import torch

        enc = self.inputs(images, questions, thinking)
        with torch.no_grad():
            out = self.model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False)
        return self.tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=False)


def split_output(text: str, thinking: bool) -> tuple[str, str]:
    """(reasoning, answer) from a generated continuation. The reasoning is kept as the pipeline keeps it:
    everything before `</think>`, including the newline before it."""
    text = text.split("<|im_end|>")[0].replace("<|endoftext|>", "")
    if thinking:
        reasoning, _, answer = text.partition("</think>")
        return reasoning, answer.strip()
    return "", text.strip()


def run_strategy(side: Side, samples, questions, thinking: bool, batch: int = 100):
    max_new = 48 if thinking else 8
    outs = []
    for i in range(0, len(samples), batch):
        chunk = samples[i:i + batch]
        outs += side.generate([s.image for s in chunk], questions[i:i + batch], thinking, max_new)
    return [split_output(o, thinking) for o in outs]


def time_strategy(side: Side, samples, questions, thinking: bool) -> tuple[float, float]:
    """Mean ms and mean generated tokens per sample, one sample at a time."""
    ms, toks = [], []
    for s, q in zip(samples, questions):
        t = time.perf_counter()
        out = side.generate([s.image], [q], thinking, 48 if thinking else 8)[0]
        ms.append((time.perf_counter() - t) * 1000)
        toks.append(len(side.tok(out.split("<|im_end|>")[0] + "<|im_end|>", add_special_tokens=False)["input_ids"]))
    return float(np.mean(ms)), float(np.mean(toks))


def evaluate(ckpt, n: int, seed: int, n_timed: int):
    import torch

    torch.set_num_threads(1)
    ckpt = pathlib.Path(ckpt)
    small, large = Side(ckpt / "small"), Side(ckpt / "large")
    samples = make_samples("eval", n, seed)
    qs = [s.question for s in samples]
    res = {"small_direct": run_strategy(small, samples, qs, False), "small_reason": run_strategy(small, samples, qs, True),
           "large_direct": run_strategy(large, samples, qs, False), "large_reason": run_strategy(large, samples, qs, True)}
    small_r = [r for r, _ in res["small_reason"]]
    for k in TRANSFER_KS + (None,):
        tq = [M.transfer_question(q, r if k is None else r[:k]) for q, r in zip(qs, small_r)]
        res[f"transfer_{k or 'all'}"] = run_strategy(large, samples, tq, False)
    timed = samples[:n_timed]
    lat = {"small_direct": time_strategy(small, timed, qs, False), "small_reason": time_strategy(small, timed, qs, True),
           "large_direct": time_strategy(large, timed, qs, False), "large_reason": time_strategy(large, timed, qs, True)}
    tq = [M.transfer_question(q, r) for q, r in zip(qs[:n_timed], small_r)]
    t_large = time_strategy(large, timed, tq, False)
    lat["transfer_all"] = (lat["small_reason"][0] + t_large[0], lat["small_reason"][1] + t_large[1])
    return samples, res, lat


def evaluate_ladder(ckpt, n: int, seed: int, n_timed: int, aliases=("small", "mid", "large")):
    """Direct and reasoning accuracy of every side of a ladder (cheapest first), the transfer of each side's full
    reasoning to every more expensive side (`transfer_<a>_<b>_all`), and single-sample latency of each side's modes."""
    import torch

    torch.set_num_threads(1)
    ckpt = pathlib.Path(ckpt)
    sides = {a: Side(ckpt / a) for a in aliases}
    samples = make_samples("eval", n, seed)
    qs = [s.question for s in samples]
    res, lat, timed = {}, {}, samples[:n_timed]
    for a, side in sides.items():
        for mode, thinking in (("direct", False), ("reason", True)):
            res[f"{a}_{mode}"] = run_strategy(side, samples, qs, thinking)
            lat[f"{a}_{mode}"] = time_strategy(side, timed, qs, thinking) if n_timed else (float("nan"),) * 2
    for i, a in enumerate(aliases):
        reasoning = [r for r, _ in res[f"{a}_reason"]]
        for b in aliases[i + 1:]:
            tq = [M.transfer_question(q, r) for q, r in zip(qs, reasoning)]
            res[f"transfer_{a}_{b}_all"] = run_strategy(sides[b], samples, tq, False)
    return samples, res, lat


def table(samples, res, lat) -> str:
    gold = np.array([s.answer for s in samples])
    hard = np.array([s.hard for s in samples])
    by_n = sorted({s.difficulty for s in samples})
    head = "| strategy | acc | easy (N<5) | hard (N>=5) | " + " | ".join(f"N={n}" for n in by_n) + " | ms/sample | out tokens |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    diff = np.array([s.difficulty for s in samples])
    for name, outs in res.items():
        ok = np.array([a == g for (_, a), g in zip(outs, gold)])
        cells = [ok.mean(), ok[~hard].mean(), ok[hard].mean()] + [ok[diff == n].mean() for n in by_n]
        ms, tk = lat.get(name, (float("nan"), float("nan")))
        lines.append(f"| {name} | " + " | ".join(f"{100 * c:.1f}" for c in cells) + f" | {ms:.1f} | {tk:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Measure the toy world's effects with plain transformers generate.",
                                epilog="example: python -m routedvlm.data.toyworld.quick_eval --n 500")
    p.add_argument("--ckpt", default=str(pathlib.Path(__file__).parent / "checkpoints"))
    p.add_argument("--n", type=int, default=500, help="eval-split samples")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timed", type=int, default=40, help="samples timed one at a time for latency")
    p.add_argument("--ladder", nargs="+", default=None, metavar="ALIAS",
                   help="evaluate these checkpoint folders as a ladder, cheapest first (e.g. small mid large)")
    args = p.parse_args(argv)
    t0 = time.time()
    if args.ladder:
        samples, res, lat = evaluate_ladder(args.ckpt, args.n, args.seed, args.timed, tuple(args.ladder))
    else:
        samples, res, lat = evaluate(args.ckpt, args.n, args.seed, args.timed)
    print(table(samples, res, lat))
    print(f"({len(samples)} eval samples, latency over the first {args.timed}; {time.time() - t0:.0f}s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
