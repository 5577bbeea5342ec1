"""Train the toy world's small and large Qwen2-VL models from scratch on the CPU, seeded and resumable.

Both learn a direct mode (thinking off) and a reasoning mode (thinking on) in one hybrid checkpoint; the large one
also learns to answer with (partial, sometimes corrupted) draft reasoning in its prompt, thinking off. A linear
"read the slot" head on the vision tower's merged tokens speeds up learning to see; it is not saved. Training runs at
the compact shapes of `models.SIDES`; the saved checkpoint is their exact zero-padded copy (`padding.py`: text hidden
128 = 4 heads x 32, positions 2048), the shape vLLM's CPU attention serves.
Example: python -m routedvlm.data.toyworld.train_models --out data/toyworld/checkpoints
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import os
import pathlib
import subprocess
import sys
import time
from dataclasses import dataclass

import numpy as np

from . import models as M
from . import qwen3vl as Q3
from .padding import pad_qwen2vl
from .task import N_SLOTS, make_samples

log = logging.getLogger(__name__)
HINT_PREFIXES = (4, 8, 16, 32, None)  # None = all of the reasoning
SIDE_IDS = {"small": 1, "large": 2, Q3.SIDE: 3, "mid": 4}  # seed slots; 3 is also the phase-3 hint pool's (the Qwen3-VL large has one phase)
SAVED_HIDDEN = 128  # the shipped (padded) text hidden size: head size 32, in vLLM-CPU's list


@dataclass(frozen=True)
class TrainConfig:
    """Recipe of one side. mix = (direct, think, transfer) shares of the batch. An optional second phase
    (steps2 > 0) restarts the learning rate at lr2 (warm-up, cosine) with its own mix; an optional third
    (steps3 > 0) also starts a fresh optimizer and drops the slot-reading loss; it may use its own mix on hard
    samples and, for transfer examples, the trained small model's own reasoning as the hint (`self_hints3`)."""

    steps: int
    batch: int
    lr: float
    mix: tuple[float, float, float]
    corrupt: float = 0.2
    warmup: int = 50
    aux_weight: float = 1.0
    steps2: int = 0
    lr2: float = 0.0
    mix2: tuple[float, float, float] = (0.0, 0.0, 0.0)
    steps3: int = 0
    lr3: float = 0.0
    mix3: tuple[float, float, float] = (0.0, 0.0, 0.0)
    mix3_hard: tuple[float, float, float] | None = None  # phase-3 mix on hard samples (N >= 5); None = mix3
    self_hints3: int = 0  # > 0: phase-3 transfer hints are the small checkpoint's own greedy reasoning on a pool
    corrupt3: float = 0.0  # of this many train samples; synthetic corruption share on top of them

    @property
    def total_steps(self) -> int:
        return self.steps + self.steps2 + self.steps3

    def phase(self, step: int) -> tuple[int, float, tuple, int]:
        """(steps, lr, mix, step within the phase) of the phase `step` is in."""
        if step < self.steps:
            return self.steps, self.lr, self.mix, step
        if step < self.steps + self.steps2:
            return self.steps2, self.lr2, self.mix2, step - self.steps
        return self.steps3, self.lr3, self.mix3, step - self.steps - self.steps2


RECIPES = {
    "small": TrainConfig(steps=600, batch=64, lr=3e-3, mix=(0.15, 0.85, 0.0)),
    # Between the two (issue 30's ladder): one phase, more direct practice than the small, some transfer examples
    # (synthetic hints) so it can take the small's reasoning.
    "mid": TrainConfig(steps=800, batch=64, lr=3e-3, mix=(0.25, 0.6, 0.15)),
    # Phase 3 (NOTES.md, step 8): no direct examples on hard samples; transfer hints = the small's own reasoning.
    "large": TrainConfig(steps=1000, batch=32, lr=2.5e-3, mix=(0.4, 0.3, 0.3),
                         steps2=600, lr2=1.5e-3, mix2=(0.35, 0.45, 0.2),
                         steps3=300, lr3=5e-4, mix3=(0.3, 0.3, 0.4), mix3_hard=(0.0, 0.4, 0.6),
                         self_hints3=4000, corrupt3=0.1),
    # The Qwen3-VL large (qwen3vl.py, for vLLM's hidden-state extraction): phase 1 of the large recipe, shorter.
    Q3.SIDE: TrainConfig(steps=400, batch=16, lr=2.5e-3, mix=(0.4, 0.3, 0.3), warmup=30),
    # Tried (NOTES.md, step 7) and not shipped: steps3=300, lr3=5e-4, mix3=(0.3, 0.2, 0.5) with synthetic hints.
}


def corrupt_reasoning(bars, rng) -> str:
    """A plausible wrong trace: the red sum off by 1-3 or the blue count off by one, arithmetic consistent."""
    red = sum(b.value for b in bars if b.colour == "red")
    blue = sum(1 for b in bars if b.colour == "blue")
    if rng.random() < 0.7:
        red = max(1, red + int(rng.choice([-3, -2, -1, 1, 2, 3])))
    else:
        blue = max(1, blue + int(rng.choice([-1, 1])))
    return f"red={red}. blue={blue}. {red}*{blue}={red * blue}."


def make_item(sample, mode: str, rng, corrupt: float):
    """(bars, prompt, target, answer_len) for one training example of `mode`."""
    tail = sample.answer + "<|im_end|>"
    if mode == "direct":
        return sample.bars, M.prompt_text(sample.question, False), tail, len(sample.answer) + 1
    if mode == "think":
        target = sample.reasoning + "\n</think>\n\n" + tail
        return sample.bars, M.prompt_text(sample.question, True), target, len(sample.answer) + 1
    reasoning = corrupt_reasoning(sample.bars, rng) if rng.random() < corrupt else sample.reasoning
    k = HINT_PREFIXES[int(rng.integers(len(HINT_PREFIXES)))]
    # The pipeline's reasoning text ends with the "\n" before </think>; callers that strip it are covered too.
    full = reasoning + "\n" if rng.random() < 0.5 else reasoning
    hint = full if k is None else full[:k]
    return sample.bars, M.prompt_text(M.transfer_question(sample.question, hint), False), tail, len(sample.answer) + 1


def slot_targets(bars_list):
    """Per image token: 0 empty, 1-9 red value, 10-18 blue value."""
    out = np.zeros((len(bars_list), N_SLOTS), dtype=np.int64)
    for i, bars in enumerate(bars_list):
        for b in bars:
            out[i, b.slot] = b.value + (0 if b.colour == "red" else 9)
    return out.reshape(-1)


def make_batch(tok, side: str, cfg: TrainConfig, seed: int, step: int, hints=None):
    samples = make_samples("train", cfg.batch, seed=seed * 1_000_003 + SIDE_IDS[side] * 100_000 + step)
    rng = np.random.default_rng([seed, SIDE_IDS[side], step])
    mix = cfg.phase(step)[2]
    modes = rng.choice(["direct", "think", "transfer"], size=len(samples), p=list(mix))
    in_phase3 = cfg.steps3 > 0 and step >= cfg.steps + cfg.steps2
    if in_phase3 and cfg.mix3_hard is not None:
        hard_modes = rng.choice(["direct", "think", "transfer"], size=len(samples), p=list(cfg.mix3_hard))
        modes = np.where([s.hard for s in samples], hard_modes, modes)
    items = [make_hint_item(s, hints, rng, cfg.corrupt3) if in_phase3 and hints and m == "transfer"
             else make_item(s, m, rng, cfg.corrupt) for s, m in zip(samples, modes)]
    batch = M.encode_batch(tok, items)
    import torch

    batch["slots"] = torch.from_numpy(slot_targets([it[0] for it in items]))
    return batch, modes


def make_hint_item(sample, hints, rng, corrupt: float):
    """A transfer example whose hint is the small model's own reasoning on a pool sample of the same hardness
    (`hints[hard]` = list of (sample, reasoning)); `corrupt` of them get a synthetic wrong trace instead."""
    pool = hints[sample.hard]
    other, reasoning = pool[int(rng.integers(len(pool)))]
    if rng.random() < corrupt:
        reasoning = corrupt_reasoning(other.bars, rng) + "\n"
    k = HINT_PREFIXES[int(rng.integers(len(HINT_PREFIXES)))]
    hint = reasoning if k is None else reasoning[:k]
    tail = other.answer + "<|im_end|>"
    return other.bars, M.prompt_text(M.transfer_question(other.question, hint), False), tail, len(other.answer) + 1


def small_hints(out: pathlib.Path, seed: int, n: int) -> dict[bool, list]:
    """The saved small model's greedy reasoning (kept as the pipeline keeps it) on `n` train samples, batched,
    split by hardness: {hard: [(sample, reasoning), ...]}. Deterministic in (small checkpoint, seed, n)."""
    from .quick_eval import Side, run_strategy

    if not (out / "small" / "config.json").exists():
        raise FileNotFoundError(f"phase 3 needs the trained small model in {out / 'small'}; train it first")
    pool = make_samples("train", n, seed=seed * 1_000_003 + 3 * 100_000)
    outs = run_strategy(Side(out / "small"), pool, [s.question for s in pool], True, batch=250)
    hints = {False: [], True: []}
    for s, (reasoning, answer) in zip(pool, outs):
        hints[s.hard].append((s, reasoning))
    right = np.mean([a == s.answer for s, (_, a) in zip(pool, outs)])
    log.info("small hints: %d train samples, small_reason accuracy %.1f %%", n, 100 * right)
    return hints


def lr_at(cfg: TrainConfig, step: int) -> float:
    steps, lr, _, step = cfg.phase(step)
    if step < cfg.warmup:
        return lr * (step + 1) / cfg.warmup
    t = (step - cfg.warmup) / max(1, steps - cfg.warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def _loss(model, head, batch, captured, aux_weight):
    import torch.nn.functional as F

    weights, slots = batch.pop("weights"), batch.pop("slots")
    logits = model(**batch).logits[:, :-1]
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["input_ids"][:, 1:].reshape(-1), reduction="none")
    w = weights[:, 1:].reshape(-1)
    lm = (ce * w).sum() / w.sum()
    aux = F.cross_entropy(head(captured["merged"]), slots)
    per_example = (ce.view(weights.shape[0], -1) * (weights[:, 1:] > 1)).sum(1) / (weights[:, 1:] > 1).sum(1)
    return lm + aux_weight * aux, lm.item(), aux.item(), per_example.detach()


def train_side(side: str, out_dir, seed: int = 0, steps: int | None = None, threads: int = 1) -> pathlib.Path:
    """Train one side from scratch (resuming from `out_dir/.state/<side>.pt` if present) and save it."""
    import torch
    from transformers import Qwen2VLForConditionalGeneration

    qwen3 = side == Q3.SIDE
    torch.set_num_threads(threads)
    cfg = RECIPES[side] if steps is None else TrainConfig(**{**RECIPES[side].__dict__, "steps": steps, "steps2": 0, "steps3": 0})
    out = pathlib.Path(out_dir)
    state_path = out / ".state" / f"{side}.safetensors"
    tok = M.build_tokenizer()
    torch.manual_seed(seed * 7 + SIDE_IDS[side])
    model = Q3.new_model(tok) if qwen3 else Qwen2VLForConditionalGeneration(M.build_config(side, tok))
    head = torch.nn.Linear(Q3.SPEC.hidden if qwen3 else M.SIDES[side].hidden, 19)
    params = list(model.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.01, betas=(0.9, 0.98))
    captured = {}
    model.model.visual.merger.register_forward_hook(lambda mod, inp, outp: captured.__setitem__("merged", outp))
    start = 0
    if state_path.exists():
        state = load_state(state_path)
        model.load_state_dict(state["model"]), head.load_state_dict(state["head"])
        start = state["step"]
        if cfg.steps3 and start > cfg.steps + cfg.steps2:  # phase 3's optimizer holds the model's parameters only
            params = list(model.parameters())
            opt = torch.optim.AdamW(params, lr=cfg.lr3, weight_decay=0.01, betas=(0.9, 0.98))
        opt.load_state_dict(state["opt"])
        log.info("%s: resuming at step %d", side, start)
    model.train()
    t0, hist = time.time(), {"direct": [], "think": [], "transfer": []}
    aux_weight = cfg.aux_weight if start < cfg.steps + cfg.steps2 or not cfg.steps3 else 0.0
    hints = None
    for step in range(start, cfg.total_steps):
        if cfg.steps3 and step == cfg.steps + cfg.steps2:  # third phase: fresh optimizer, no slot loss
            params, aux_weight = list(model.parameters()), 0.0
            opt = torch.optim.AdamW(params, lr=cfg.lr3, weight_decay=0.01, betas=(0.9, 0.98))
        if cfg.self_hints3 and hints is None and step >= cfg.steps + cfg.steps2:
            hints = small_hints(out, seed, cfg.self_hints3)
        for g in opt.param_groups:
            g["lr"] = lr_at(cfg, step)
        batch, modes = make_batch(tok, side, cfg, seed, step, hints)
        loss, lm, aux, per_ex = _loss(model, head, batch, captured, aux_weight)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        for m in hist:
            sel = per_ex[torch.from_numpy(modes == m)]
            if len(sel):
                hist[m].append(sel.mean().item())
        if (step + 1) % 50 == 0 or step + 1 == cfg.total_steps:
            ans = " ".join(f"{m}={np.mean(v[-50:]):.3f}" for m, v in hist.items() if v)
            log.info("%s step %d/%d lm=%.3f aux=%.3f answer-loss %s (%.0fs)", side, step + 1, cfg.total_steps, lm, aux,
                     ans, time.time() - t0)
        if (step + 1) % 200 == 0 and step + 1 < cfg.total_steps:
            state_path.parent.mkdir(parents=True, exist_ok=True)
            save_state(state_path, model, head, opt, step + 1)
    model.eval()
    path = Q3.save(model, tok, out / side) if qwen3 else M.save_side(pad_qwen2vl(model, hidden=SAVED_HIDDEN), tok, out / side)
    log.info("%s: saved to %s after %.0fs", side, path, time.time() - t0)
    return path



def save_state(path: pathlib.Path, model, head, opt, step: int) -> None:
    """The resumable training state as safetensors (no pickle): weights, AdamW tensors, step + param groups as JSON."""
    from safetensors.torch import save_file

    tensors = {f"model.{k}": v for k, v in model.state_dict().items()}
    tensors.update({f"head.{k}": v for k, v in head.state_dict().items()})
    sd = opt.state_dict()
    tensors.update({f"opt.{i}.{k}": v for i, st in sd["state"].items() for k, v in st.items() if hasattr(v, "detach")})
    tensors = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp), metadata={"step": str(step), "param_groups": json.dumps(sd["param_groups"])})
    os.replace(tmp, path)


def load_state(path: pathlib.Path) -> dict:
    """Inverse of `save_state`: {"model", "head", "opt", "step"} ready for `load_state_dict`."""
    from safetensors import safe_open

    state = {"model": {}, "head": {}, "opt": {"state": {}, "param_groups": None}}
    with safe_open(str(path), framework="pt") as fh:
        meta = fh.metadata()
        for key in fh.keys():
            part, rest = key.split(".", 1)
            if part == "opt":
                i, name = rest.split(".", 1)
                state["opt"]["state"].setdefault(int(i), {})[name] = fh.get_tensor(key)
            else:
                state[part][rest] = fh.get_tensor(key)
    state["opt"]["param_groups"] = json.loads(meta["param_groups"])
    state["step"] = int(meta["step"])
    return state

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Train the toy world's small and large VLMs from scratch on the CPU.",
                                epilog="example: python -m routedvlm.data.toyworld.train_models --out data/toyworld/checkpoints")
    p.add_argument("--out", default="data/toyworld/checkpoints", help="folder that receives small/ and large/")
    p.add_argument("--sides", nargs="+", default=["small", "mid", "large"], choices=sorted(RECIPES))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=None, help="override the recipe's step count (pilot runs)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per side")
    p.add_argument("--parallel", action="store_true", help="train the sides in parallel processes")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stdout)
    t0 = time.time()
    if args.parallel and len(args.sides) > 1:
        base = [sys.executable, "-m", "routedvlm.data.toyworld.train_models", "--out", args.out, "--seed",
                str(args.seed), "--threads", str(args.threads)] + (["--steps", str(args.steps)] if args.steps else [])
        procs = [subprocess.Popen(base + ["--sides", s]) for s in args.sides]
        codes = [pr.wait() for pr in procs]
        if any(codes):
            return 1
    else:
        for side in args.sides:
            train_side(side, args.out, seed=args.seed, steps=args.steps, threads=args.threads)
    print(f"trained {', '.join(args.sides)} in {time.time() - t0:.0f}s -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
