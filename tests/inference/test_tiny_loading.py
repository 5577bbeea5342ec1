"""Tiny VLM builders and `VLM.from_pretrained` for every supported architecture, without torchvision."""
import json
import sys

import pytest

from routedvlm.errors import ConfigError, ModelLoadError

ARCHS = ["qwen2_vl", "qwen3_vl", "smolvlm", "llava_onevision"]


@pytest.mark.parametrize("arch", ARCHS)
def test_every_arch_builds_loads_and_escalates(arch, tiny_vlm, make_pipeline, images):
    import torch

    vlm = tiny_vlm(arch)
    pipe = make_pipeline(vlm, vlm)
    q = "What colour is the box?"
    first = pipe.run(images["square"], q, "large_direct")
    assert first.generation.output_tokens >= 4
    two_stage = pipe.escalate(first, 8)
    one_stage = pipe.run(images["square"], q, "transfer_8")
    assert two_stage.generation.token_ids == one_stage.generation.token_ids
    a, b = two_stage.generation.first_logits, one_stage.generation.first_logits
    keep = torch.isfinite(a) & torch.isfinite(b)
    assert torch.allclose(a[keep], b[keep], atol=1e-4)
    assert two_stage.trace[-1]["vision_ms"] == 0 and two_stage.trace[-1]["cached_tokens"] > 0
    assert "torchvision" not in sys.modules


def test_tokenizer_and_weights_are_deterministic(tmp_path):
    from safetensors.torch import load_file

    from routedvlm.inference import build_tiny_vlm

    a = build_tiny_vlm("qwen3_vl", tmp_path / "a", seed=5)
    b = build_tiny_vlm("qwen3_vl", tmp_path / "b", seed=5)
    assert (a / "tokenizer.json").read_text() == (b / "tokenizer.json").read_text()
    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert wa.keys() == wb.keys() and all((wa[k] == wb[k]).all() for k in wa)


def test_plain_save_pretrained_folder_loads(tmp_path, images):
    """A folder written with plain save_pretrained (no processor_config.json) loads by model type."""
    from routedvlm.inference import VLM, build_tiny_vlm

    path = build_tiny_vlm("qwen2_vl", tmp_path / "plain")
    (path / "processor_config.json").unlink()
    vlm = VLM.from_pretrained(path)
    assert vlm.style == "never"
    assert vlm.encode(images["square"], vlm.render([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "q"}]}], "direct"))["input_ids"].shape[1] > 0


def test_mid_size_has_256_image_tokens(tmp_path):
    from routedvlm.inference.tiny_configs import SIZES

    hidden, layers, *_, px = SIZES["mid"]
    assert (hidden, layers) == (512, 4) and (px // 16 // 2) ** 2 == 256


def test_unknown_arch_names_the_options(tmp_path):
    from routedvlm.inference import build_tiny_vlm

    with pytest.raises(ConfigError, match=r"^The `arch` parameter of build_tiny_vlm must be one of 'idefics3', 'llava_onevision'"):
        build_tiny_vlm("gpt2", tmp_path)


def test_missing_checkpoint_is_a_model_load_error(tmp_path):
    from routedvlm.inference import VLM

    with pytest.raises(ModelLoadError, match=r"^The checkpoint .* is neither an existing folder nor a hub id"):
        VLM.from_pretrained(tmp_path / "nope" / "deeper" / "x")


def test_processor_config_extras_round_trip(tiny_vlm):
    vlm = tiny_vlm("smolvlm")
    saved = json.loads((vlm.name and __import__("pathlib").Path(vlm.name) / "processor_config.json").read_text())
    assert vlm.processor.image_seq_len == saved["image_seq_len"]


def test_folder_without_a_model_is_a_model_load_error(tmp_path):
    from routedvlm.inference import VLM

    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match=r"^Cannot load .*empty' as an image-text-to-text model"):
        VLM.from_pretrained(tmp_path / "empty")


def _per_file_layout(folder):
    """Rewrite a folder saved by `processor.save_pretrained` (transformers >= 5.2x: one processor_config.json with
    the image processor's settings under `image_processor`) into the layout older transformers wrote:
    `preprocessor_config.json` with the image processor's settings, processor_config.json with the rest."""
    combined = json.loads((folder / "processor_config.json").read_text())
    image = combined.pop("image_processor")
    combined.pop("video_processor", None)
    (folder / "preprocessor_config.json").write_text(json.dumps({**image, "processor_class": combined["processor_class"]}))
    (folder / "processor_config.json").write_text(json.dumps(combined))


@pytest.mark.parametrize("layout", ["combined", "per-file"])
@pytest.mark.parametrize("arch", ARCHS)
def test_checkpoint_saved_with_processor_save_pretrained_loads(arch, layout, tiny_vlm, make_pipeline, images, tmp_path):
    """What a user's fine-tuning run writes (`model.save_pretrained` + `processor.save_pretrained`) loads again,
    with the same image processor settings, processor settings and answers."""
    from routedvlm.inference import VLM

    vlm, out = tiny_vlm(arch), tmp_path / arch
    vlm.model.save_pretrained(out)
    vlm.processor.save_pretrained(out)
    saved = json.loads((out / "processor_config.json").read_text())
    assert not (out / "preprocessor_config.json").exists() and "image_processor" in saved  # the pinned transformers
    assert saved["processor_class"] == type(vlm.processor).__mro__[1].__name__  # the real class, not our subclass
    if layout == "per-file":
        _per_file_layout(out)
    again = VLM.from_pretrained(out)
    assert type(again.processor.image_processor) is type(vlm.processor.image_processor)
    assert again.processor.image_processor.to_dict() == vlm.processor.image_processor.to_dict()
    assert again.processor.to_dict() == vlm.processor.to_dict()
    q = "What colour is the box?"
    assert make_pipeline(again, again).run(images["wide"], q, "large_direct").answer == \
        make_pipeline(vlm, vlm).run(images["wide"], q, "large_direct").answer
