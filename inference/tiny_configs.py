"""Model configs and image processors for the tiny builders in `tiny.py`, one function per family.

Sizes: "tiny"/"small" (text hidden 64, 2 layers), "large" (hidden 128, 3 layers) and "mid" (hidden 512,
4 layers, 256 image tokens for the Qwen families) for the escalation benchmark.
"""
from __future__ import annotations

ARCHS = ("qwen2_vl", "qwen3_vl", "smolvlm", "idefics3", "llava_onevision")
# size -> (text hidden, layers, heads, kv heads, vision hidden, vision depth, image px)
SIZES = {
    "tiny": (64, 2, 4, 2, 32, 1, 64),
    "small": (64, 2, 4, 2, 32, 1, 64),
    "large": (128, 3, 4, 2, 64, 2, 64),
    "mid": (512, 4, 8, 4, 128, 2, 512),
}


def _vocab(tok) -> int:
    return ((len(tok) + 63) // 64) * 64


def _text(tok, hidden, layers, heads, kv) -> dict:
    return dict(
        vocab_size=_vocab(tok), hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=4096,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=None,
    )


def _qwen_image_processor(px: int, patch: int):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    factor = patch * 2
    return Qwen2VLImageProcessorPil(
        size={"shortest_edge": factor * factor, "longest_edge": px * px},
        patch_size=patch, temporal_patch_size=2, merge_size=2,
    )


def _qwen3_vl(tok, hidden, layers, heads, kv, vh, vd, px):
    from transformers import Qwen3VLConfig

    head_dim = hidden // heads
    half = head_dim // 2
    section = [half - 2 * (half // 3), half // 3, half // 3]
    text = _text(tok, hidden, layers, heads, kv)
    text.update(head_dim=head_dim, rope_parameters={
        "rope_type": "default", "rope_theta": 10000.0, "mrope_section": section, "mrope_interleaved": True})
    vision = dict(depth=vd, hidden_size=vh, intermediate_size=vh * 2, num_heads=2, patch_size=16,
                  spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=hidden,
                  num_position_embeddings=(px // 16) ** 2, deepstack_visual_indexes=[vd - 1])
    cfg = Qwen3VLConfig(
        text_config=text, vision_config=vision,
        image_token_id=tok.convert_tokens_to_ids("<|image_pad|>"), video_token_id=tok.convert_tokens_to_ids("<|video_pad|>"),
        vision_start_token_id=tok.convert_tokens_to_ids("<|vision_start|>"),
        vision_end_token_id=tok.convert_tokens_to_ids("<|vision_end|>"),
    )
    return cfg, _qwen_image_processor(px, 16), {"processor_class": "Qwen3VLProcessor"}


def _qwen2_vl(tok, hidden, layers, heads, kv, vh, vd, px):
    from transformers import Qwen2VLConfig

    half = hidden // heads // 2
    section = [half - 2 * (half // 3), half // 3, half // 3]
    text = _text(tok, hidden, layers, heads, kv)
    text.update(rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": section})
    vision = dict(depth=vd, embed_dim=vh, hidden_size=hidden, mlp_ratio=2, num_heads=2, patch_size=14,
                  spatial_merge_size=2, temporal_patch_size=2)
    cfg = Qwen2VLConfig(
        text_config=text, vision_config=vision,
        image_token_id=tok.convert_tokens_to_ids("<|image_pad|>"), video_token_id=tok.convert_tokens_to_ids("<|video_pad|>"),
        vision_start_token_id=tok.convert_tokens_to_ids("<|vision_start|>"),
        vision_end_token_id=tok.convert_tokens_to_ids("<|vision_end|>"),
    )
    px = max(56, (px // 28) * 28)
    return cfg, _qwen_image_processor(px, 14), {"processor_class": "Qwen2VLProcessor"}


def _smolvlm(tok, hidden, layers, heads, kv, vh, vd, px):
    from transformers import SmolVLMConfig
    from transformers.models.smolvlm.image_processing_pil_smolvlm import SmolVLMImageProcessorPil

    patch = 8 if px <= 128 else 16
    vision = dict(hidden_size=vh, intermediate_size=vh * 2, num_hidden_layers=vd, num_attention_heads=2,
                  image_size=px, patch_size=patch)
    text = _text(tok, hidden, layers, heads, kv)
    text["model_type"] = "llama"
    cfg = SmolVLMConfig(text_config=text, vision_config=vision, scale_factor=2,
                        image_token_id=tok.convert_tokens_to_ids("<image>"))
    ip = SmolVLMImageProcessorPil(do_image_splitting=False, size={"longest_edge": px},
                                  max_image_size={"longest_edge": px})
    seq_len = (px // patch) ** 2 // 4
    return cfg, ip, {"processor_class": "SmolVLMProcessor", "image_seq_len": seq_len}


def _llava_onevision(tok, hidden, layers, heads, kv, vh, vd, px):
    from transformers import LlavaOnevisionConfig
    from transformers.models.llava_onevision.image_processing_pil_llava_onevision import (
        LlavaOnevisionImageProcessorPil,
    )

    patch = 16
    vision = dict(model_type="siglip_vision_model", hidden_size=vh, intermediate_size=vh * 2,
                  num_hidden_layers=vd, num_attention_heads=2, image_size=px, patch_size=patch)
    text = _text(tok, hidden, layers, heads, kv)
    text["model_type"] = "qwen2"
    cfg = LlavaOnevisionConfig(
        text_config=text, vision_config=vision, image_token_index=tok.convert_tokens_to_ids("<image>"),
        video_token_index=tok.convert_tokens_to_ids("<video>"), vision_feature_select_strategy="full",
        vision_feature_layer=-1, image_grid_pinpoints=[[px, px]],
    )
    ip = LlavaOnevisionImageProcessorPil(size={"height": px, "width": px}, image_grid_pinpoints=[[px, px]])
    extra = {"processor_class": "LlavaOnevisionProcessor", "num_image_tokens": (px // patch) ** 2,
             "vision_feature_select_strategy": "full"}
    return cfg, ip, extra


_BUILDERS = {"qwen3_vl": _qwen3_vl, "qwen2_vl": _qwen2_vl, "smolvlm": _smolvlm, "idefics3": _smolvlm,
             "llava_onevision": _llava_onevision}


def model_config(arch: str, size: str, tok):
    """(model config, PIL image processor, processor_config.json extras) for one family and size."""
    return _BUILDERS[arch](tok, *SIZES[size])
