"""Tokenizer, configs, image processor and batch encoding for the toy world's pair of tiny Qwen2-VL models.

One image = 16x96 px -> Qwen2-VL patches of 8, merged 2x2 -> 6 image tokens, one per bar slot. The tokenizer is
byte-level with no merges (one token per character). `encode_batch` builds model inputs in numpy, equal to what
the saved tokenizer + chat template + PIL image processor produce (tested), so training is fast and loading is normal.
"""
from __future__ import annotations

import json
import pathlib
from dataclasses import dataclass

import numpy as np

from routedvlm.inference.chat_templates import QWEN_HYBRID_THINKING_TEMPLATE
from routedvlm.inference.prompts import DEFAULT_PROMPTS

from .task import IMAGE_HEIGHT, IMAGE_WIDTH, render

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                  "<|image_pad|>", "<|video_pad|>", "<think>", "</think>")
PATCH, MERGE, TEMPORAL = 8, 2, 2
N_IMAGE_TOKENS = (IMAGE_HEIGHT // PATCH // MERGE) * (IMAGE_WIDTH // PATCH // MERGE)
CLIP_MEAN = np.array([0.48145466, 0.4578275, 0.40821073], dtype=np.float32)
CLIP_STD = np.array([0.26862954, 0.26130258, 0.27577711], dtype=np.float32)
THINK_OFF = "<think>\n\n</think>\n\n"
THINK_ON = "<think>\n"


@dataclass(frozen=True)
class SideSpec:
    """Sizes of one side's model (text decoder and vision tower)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    vision_dim: int
    vision_depth: int


SIDES = {
    "small": SideSpec(hidden=64, layers=2, heads=4, kv_heads=2, ffn=256, vision_dim=32, vision_depth=1),
    # mid: the small's widths with a third layer (head size 16, padded exactly like the small's); issue 30's ladder.
    "mid": SideSpec(hidden=64, layers=3, heads=4, kv_heads=2, ffn=256, vision_dim=32, vision_depth=1),
    "large": SideSpec(hidden=96, layers=4, heads=4, kv_heads=2, ffn=256, vision_dim=32, vision_depth=1),
}


def build_tokenizer():
    """Deterministic character-level tokenizer: the specials, then the 256 byte symbols; no merges."""
    from routedvlm.inference.tiny import build_tokenizer as byte_level_tokenizer

    tok = byte_level_tokenizer(SPECIAL_TOKENS)
    tok.chat_template = QWEN_HYBRID_THINKING_TEMPLATE
    return tok


def build_image_processor():
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    return Qwen2VLImageProcessorPil(size={"shortest_edge": 16 * 16, "longest_edge": IMAGE_HEIGHT * IMAGE_WIDTH},
                                    patch_size=PATCH, temporal_patch_size=TEMPORAL, merge_size=MERGE)


def build_config(side: str, tok):
    from transformers import Qwen2VLConfig

    s = SIDES[side]
    half = s.hidden // s.heads // 2
    section = [half - 2 * (half // 3), half // 3, half // 3]
    text = dict(vocab_size=((len(tok) + 63) // 64) * 64, hidden_size=s.hidden, intermediate_size=s.ffn,
                num_hidden_layers=s.layers, num_attention_heads=s.heads, num_key_value_heads=s.kv_heads,
                max_position_embeddings=512, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                bos_token_id=None, tie_word_embeddings=False,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": section})
    vision = dict(depth=s.vision_depth, embed_dim=s.vision_dim, hidden_size=s.hidden, mlp_ratio=2, num_heads=2,
                  patch_size=PATCH, spatial_merge_size=MERGE, temporal_patch_size=TEMPORAL, in_channels=3)
    ids = tok.convert_tokens_to_ids
    return Qwen2VLConfig(text_config=text, vision_config=vision, image_token_id=ids("<|image_pad|>"),
                         video_token_id=ids("<|video_pad|>"), vision_start_token_id=ids("<|vision_start|>"),
                         vision_end_token_id=ids("<|vision_end|>"), tie_word_embeddings=False)


def messages(question: str) -> list[dict]:
    """The chat the pipeline sends: one user turn, the image first, then the question text."""
    return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]


def prompt_text(question: str, thinking: bool, n_image_tokens: int = N_IMAGE_TOKENS) -> str:
    """The rendered chat-template prompt with the image pad expanded (equal to apply_chat_template + processor)."""
    return ("<|im_start|>user\n<|vision_start|>" + "<|image_pad|>" * n_image_tokens + "<|vision_end|>"
            + question + "<|im_end|>\n<|im_start|>assistant\n" + (THINK_ON if thinking else THINK_OFF))


def transfer_question(question: str, reasoning: str) -> str:
    return DEFAULT_PROMPTS.transfer_question(question, reasoning)


def pixel_values(images: list[np.ndarray]) -> np.ndarray:
    """Qwen2-VL patches of uint8 (H, W, 3) images, concatenated: (n_images * 24, 384) float32."""
    out = []
    for img in images:
        x = (img.astype(np.float32) / 255.0 - CLIP_MEAN) / CLIP_STD
        x = x.transpose(2, 0, 1)
        c, h, w = x.shape
        gh, gw = h // PATCH, w // PATCH
        p = x.reshape(c, gh // MERGE, MERGE, PATCH, gw // MERGE, MERGE, PATCH).transpose(1, 4, 2, 5, 0, 3, 6)
        p = np.broadcast_to(p[:, :, :, :, :, None], (*p.shape[:5], TEMPORAL, PATCH, PATCH))
        out.append(p.reshape(gh * gw, c * TEMPORAL * PATCH * PATCH))
    return np.concatenate(out).astype(np.float32)


def char_ids(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def encode_batch(tok, items, *, answer_weight: float = 4.0):
    """Training tensors for items (bars, prompt, target, answer_len). Loss weights: 0 on the prompt and padding,
    `answer_weight` on the last `answer_len` target tokens, 1 elsewhere. Returns a dict of torch tensors."""
    import torch

    prompts = tok([it[1] for it in items], add_special_tokens=False)["input_ids"]
    targets = tok([it[2] for it in items], add_special_tokens=False)["input_ids"]
    length = max(len(p) + len(t) for p, t in zip(prompts, targets))
    ids = np.full((len(items), length), tok.pad_token_id, dtype=np.int64)
    weights = np.zeros((len(items), length), dtype=np.float32)
    mask = np.zeros((len(items), length), dtype=np.int64)
    for i, (p, t, it) in enumerate(zip(prompts, targets, items)):
        n = len(p) + len(t)
        ids[i, :n] = p + t
        mask[i, :n] = 1
        weights[i, len(p):n] = 1.0
        weights[i, n - it[3]:n] = answer_weight
    image_id = tok.convert_tokens_to_ids("<|image_pad|>")
    grid = np.tile(np.array([[1, IMAGE_HEIGHT // PATCH, IMAGE_WIDTH // PATCH]]), (len(items), 1))
    return {
        "input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask),
        "mm_token_type_ids": torch.from_numpy((ids == image_id).astype(np.int64)),
        "pixel_values": torch.from_numpy(pixel_values([render(it[0]) for it in items])),
        "image_grid_thw": torch.from_numpy(grid), "weights": torch.from_numpy(weights),
    }


def save_side(model, tok, out_dir) -> pathlib.Path:
    """Save model (safetensors), tokenizer with chat template, PIL image processor and processor config."""
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.bos_token_id = None
    model.save_pretrained(out)
    tok.save_pretrained(out)
    build_image_processor().save_pretrained(out)
    (out / "processor_config.json").write_text(json.dumps({"processor_class": "Qwen2VLProcessor"}, indent=2))
    (out / "chat_template.jinja").write_text(tok.chat_template)
    return out
