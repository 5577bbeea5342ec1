"""The toy world's large model in the Qwen3-VL architecture: the one vLLM's hidden-state extraction serves
(qwen2_vl has no EAGLE3 interface in vLLM), for the self-probe with an in-process vLLM large side.

Same task, tokenizer, chat template, image processor and numpy batch path as the Qwen2-VL pair (`models.py`); the text
decoder is built directly at the shape vLLM's CPU attention serves (hidden 128 = 4 heads x 32, so no padding), the
vision tower is Qwen3-VL's (patch 8, merge 2: one merged image token per bar slot; one deepstack layer). Trained by
`train_models.py --sides large-qwen3vl` (a shorter recipe than the Qwen2-VL large); shipped as
`checkpoints/large-qwen3vl`. vLLM's processor loader also asks for a `video_preprocessor_config.json`.
"""
from __future__ import annotations

import json
import pathlib

from . import models as M
from .task import IMAGE_HEIGHT, IMAGE_WIDTH

SIDE = "large-qwen3vl"
SPEC = M.SideSpec(hidden=128, layers=4, heads=4, kv_heads=2, ffn=256, vision_dim=32, vision_depth=1)


def build_config(tok):
    from transformers import Qwen3VLConfig

    head_dim = SPEC.hidden // SPEC.heads
    half = head_dim // 2
    section = [half - 2 * (half // 3), half // 3, half // 3]
    text = dict(vocab_size=((len(tok) + 63) // 64) * 64, hidden_size=SPEC.hidden, intermediate_size=SPEC.ffn,
                num_hidden_layers=SPEC.layers, num_attention_heads=SPEC.heads, num_key_value_heads=SPEC.kv_heads,
                head_dim=head_dim, max_position_embeddings=2048, eos_token_id=tok.eos_token_id,
                pad_token_id=tok.pad_token_id, bos_token_id=None, tie_word_embeddings=False,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": section,
                                 "mrope_interleaved": True})
    grid = max(IMAGE_HEIGHT, IMAGE_WIDTH) // M.PATCH
    vision = dict(depth=SPEC.vision_depth, hidden_size=SPEC.vision_dim, intermediate_size=SPEC.vision_dim * 2,
                  num_heads=2, patch_size=M.PATCH, spatial_merge_size=M.MERGE, temporal_patch_size=M.TEMPORAL,
                  in_channels=3, out_hidden_size=SPEC.hidden, num_position_embeddings=grid * grid,
                  deepstack_visual_indexes=[SPEC.vision_depth - 1])
    ids = tok.convert_tokens_to_ids
    return Qwen3VLConfig(text_config=text, vision_config=vision, image_token_id=ids("<|image_pad|>"),
                         video_token_id=ids("<|video_pad|>"), vision_start_token_id=ids("<|vision_start|>"),
                         vision_end_token_id=ids("<|vision_end|>"), tie_word_embeddings=False)


def new_model(tok):
    from transformers import Qwen3VLForConditionalGeneration

    return Qwen3VLForConditionalGeneration(build_config(tok))


def save(model, tok, out_dir) -> pathlib.Path:
    """`models.save_side`, naming the Qwen3-VL processor, plus the video processor settings vLLM reads."""
    out = M.save_side(model, tok, out_dir)
    (out / "processor_config.json").write_text(json.dumps({"processor_class": "Qwen3VLProcessor"}, indent=2))
    image = json.loads((out / "preprocessor_config.json").read_text())
    video = {k: image[k] for k in ("image_mean", "image_std", "patch_size", "temporal_patch_size", "merge_size",
                                   "do_normalize", "do_rescale", "rescale_factor", "do_convert_rgb") if k in image}
    video.update(video_processor_type="Qwen3VLVideoProcessor", size={"shortest_edge": 16 * 16,
                                                                     "longest_edge": IMAGE_HEIGHT * IMAGE_WIDTH * 2})
    (out / "video_preprocessor_config.json").write_text(json.dumps(video, indent=2))
    return out
