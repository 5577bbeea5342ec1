"""Exact zero-padding of a Qwen2-VL text decoder to a wider hidden size / head size (same function, new shape).

vLLM's CPU attention supports head sizes 32, 64, 80, 96, ... only; the toy models are trained at head size 16 / 24.
`pad_qwen2vl(model, hidden=128)` returns a model with text hidden 128 = 4 heads x 32 that computes the same logits:
- every weight that writes the residual stream (embeddings, o_proj, down_proj, the vision merger's output) gets zero
  rows on the padded dims, every weight that reads it (q/k/v, gate/up, lm_head) zero columns, so they stay zero;
- RMSNorm averages over the padded size: mean over D with zeros = mean over d x d/D, so eps becomes eps x d/D and the
  norm weights are multiplied by sqrt(d/D);
- each head's dims sit in its two rotary halves: real dim i of a half goes to new index m*i (m = D_h/d_h when that is
  an integer, else 1), and rope_theta becomes theta^(D_h / (m*d_h)), so every real pair keeps its frequency
  (m = 2 for 16 -> 32 leaves theta unchanged); the mrope sections are scaled by m, the padding added to the last;
- the attention scale 1/sqrt(head size) changes with the head size: q_proj's weight and bias are multiplied by
  sqrt(D_h/d_h).
The vision tower is unchanged (its attention is not the CPU kernel's); only its merger's output width follows.
"""
from __future__ import annotations

import copy
import math

MIN_POSITIONS = 2048


def head_index_map(n_heads: int, d_head: int, new_head: int):
    """New row index of each old per-head dim (torch LongTensor of n_heads * d_head), and the placement factor m."""
    import torch

    half, new_half = d_head // 2, new_head // 2
    m = new_head // d_head if new_head % d_head == 0 else 1
    idx = [h * new_head + part * new_half + m * i for h in range(n_heads) for part in (0, 1) for i in range(half)]
    return torch.tensor(idx, dtype=torch.long), m


def padded_text_config(text, hidden: int, max_positions: int):
    """The text config at `hidden` (same heads, wider heads), with rope theta / sections and eps compensated."""
    d, heads = text.hidden_size, text.num_attention_heads
    d_head, new_head = d // heads, hidden // heads
    if hidden % heads or new_head < d_head or d_head % 2 or new_head % 2:
        from routedvlm.errors import ConfigError

        raise ConfigError(f"The `hidden` parameter of pad_qwen2vl must be a multiple of the {heads} heads with a head "
                          f"size >= {d_head} (the model's); got {hidden}.")
    _, m = head_index_map(1, d_head, new_head)
    new = copy.deepcopy(text)
    rope = dict(new.rope_parameters)
    rope["rope_theta"] = float(rope["rope_theta"]) ** (new_head / (m * d_head))
    section = [m * s for s in rope["mrope_section"]]
    section[-1] += new_head // 2 - sum(section)
    rope["mrope_section"] = section
    new.rope_parameters = rope
    new.hidden_size, new.head_dim = hidden, new_head
    new.rms_norm_eps = text.rms_norm_eps * d / hidden
    new.max_position_embeddings = max(int(text.max_position_embeddings), int(max_positions))
    return new


def pad_state_dict(sd: dict, text, hidden: int) -> dict:
    """The padded copy of a Qwen2-VL state dict (keys as `Qwen2VLForConditionalGeneration.state_dict()`)."""
    import torch

    d, heads, kv = text.hidden_size, text.num_attention_heads, text.num_key_value_heads
    d_head, new_head = d // heads, hidden // heads
    qmap, _ = head_index_map(heads, d_head, new_head)
    kmap, _ = head_index_map(kv, d_head, new_head)
    q_scale = math.sqrt(new_head / d_head)
    norm_scale = math.sqrt(d / hidden)
    out = {}

    def rows(w, n, index):  # scatter rows of w into a zero tensor with n rows
        new = w.new_zeros((n, *w.shape[1:]))
        new[index] = w
        return new

    def cols(w, n, index):
        new = w.new_zeros((w.shape[0], n))
        new[:, index] = w
        return new

    hid = torch.arange(d)
    for key, w in sd.items():
        name = key.rsplit(".", 2)
        tail = ".".join(name[-2:])
        if "visual." in key and not key.startswith("model.visual.merger.mlp.2."):
            new = w.clone()
        elif key.startswith("model.visual.merger.mlp.2."):
            new = rows(w, hidden, hid)
        elif tail in ("q_proj.weight", "q_proj.bias"):
            new = rows(w * q_scale, heads * new_head, qmap)
            new = cols(new, hidden, hid) if w.dim() == 2 else new
        elif tail in ("k_proj.weight", "k_proj.bias", "v_proj.weight", "v_proj.bias"):
            new = rows(w, kv * new_head, kmap)
            new = cols(new, hidden, hid) if w.dim() == 2 else new
        elif tail == "o_proj.weight":
            new = cols(rows(w, hidden, hid), heads * new_head, qmap)
        elif tail in ("gate_proj.weight", "up_proj.weight", "embed_tokens.weight") or key == "lm_head.weight":
            new = cols(w, hidden, hid)
        elif tail == "down_proj.weight":
            new = rows(w, hidden, hid)
        elif key.endswith("layernorm.weight") or key.endswith("language_model.norm.weight"):
            new = rows(w * norm_scale, hidden, hid)
        else:
            raise KeyError(f"pad_state_dict does not know how to pad {key!r} (shape {tuple(w.shape)})")
        out[key] = new.contiguous()
    return out


def pad_qwen2vl(model, hidden: int = 128, max_positions: int = MIN_POSITIONS):
    """A new `Qwen2VLForConditionalGeneration` with text hidden `hidden` computing the same function as `model`."""
    import torch
    from transformers import Qwen2VLForConditionalGeneration

    cfg = copy.deepcopy(model.config)
    text = padded_text_config(cfg.text_config, hidden, max_positions)
    cfg.text_config = text
    cfg.vision_config.hidden_size = hidden
    state = pad_state_dict(model.state_dict(), model.config.text_config, hidden)
    new = Qwen2VLForConditionalGeneration(cfg)
    new.load_state_dict(state, strict=True)
    new.generation_config = copy.deepcopy(model.generation_config)
    return new.eval()




def pad_toy_pair(src, out, hidden: int = 128) -> list:
    """Pad a compact toy pair (`src/{small,large}`, as trained before padding existed) into `out`, the way
    `train_models` saves a freshly trained side (same config, tokenizer and files, so the bytes agree)."""
    import pathlib

    from transformers import Qwen2VLForConditionalGeneration

    from . import models as M

    tok, paths = M.build_tokenizer(), []
    for side in ("small", "large"):
        model = Qwen2VLForConditionalGeneration(M.build_config(side, tok))
        loaded = Qwen2VLForConditionalGeneration.from_pretrained(pathlib.Path(src) / side)
        model.load_state_dict(loaded.state_dict(), strict=True)
        paths.append(M.save_side(pad_qwen2vl(model.eval(), hidden), tok, pathlib.Path(out) / side))
    return paths


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m routedvlm.data.toyworld.padding",
                                description="Zero-pad a compact toy pair to head size 32 (same function).",
                                epilog="example: python -m routedvlm.data.toyworld.padding --src old/ --out data/toyworld/checkpoints")
    p.add_argument("--src", required=True, help="folder with the compact small/ and large/")
    p.add_argument("--out", required=True, help="folder that receives the padded small/ and large/")
    p.add_argument("--hidden", type=int, default=128, help="padded text hidden size (default 128)")
    args = p.parse_args(argv)
    for path in pad_toy_pair(args.src, args.out, args.hidden):
        print(f"wrote {path}")
    return 0

__all__ = ["MIN_POSITIONS", "head_index_map", "pad_toy_pair", "pad_qwen2vl", "pad_state_dict", "padded_text_config"]


if __name__ == "__main__":
    raise SystemExit(main())
