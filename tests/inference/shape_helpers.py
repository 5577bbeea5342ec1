"""A tiny config.json derived from the shipped Qwen3-VL 2B shape (same structure, small sizes) for shape tests."""
import json

from routedvlm.inference.profiling.shapes import SHAPES_DIR


def tiny_shape_config(vocab_size: int = 151936, hidden: int = 64, tie: bool = True) -> dict:
    """The 2B config with 2 text layers of `hidden`, a 2-block vision tower; the published vocabulary by default."""
    cfg = json.loads((SHAPES_DIR / "qwen3-vl-2b.json").read_text())
    cfg["tie_word_embeddings"] = tie
    cfg["text_config"].update(hidden_size=hidden, intermediate_size=2 * hidden, num_attention_heads=4,
                              num_key_value_heads=2, head_dim=16, num_hidden_layers=2, vocab_size=vocab_size,
                              tie_word_embeddings=tie)
    cfg["text_config"]["rope_scaling"]["mrope_section"] = [4, 2, 2]  # sums to head_dim / 2
    cfg["vision_config"].update(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=hidden,
                                deepstack_visual_indexes=[1])
    return cfg


def write_tiny_shape(path, **kw):
    path.write_text(json.dumps(tiny_shape_config(**kw), indent=1))
    return path
