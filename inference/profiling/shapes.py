"""Models at real sizes without real weights: published configs (`shape_configs/`) built with seeded random weights.

`shape_vlm("qwen3-vl-8b", device, dtype)` (or any `config.json` path) returns a `VLM` whose model has the published
layer sizes: it is constructed on the meta device (no memory), its memory need is checked against the device
(`shape_memory.check_fits`), and only then are its parameters allocated directly in the target dtype on the target
device and filled from a seeded block of N(0, initializer_range) values (norm weights 1, biases 0). No float32 copy
of the weights exists at any point. The tokenizer is the project's byte-level one (one token per byte, so prompt
lengths are exact); the config's special-token ids are remapped onto it, the embedding keeps its published size.
Latency depends on shapes, not on trained weights: outputs are noise, timings are real.
"""
from __future__ import annotations

import hashlib
import json
import logging
import pathlib

from routedvlm.errors import ConfigError, ModelLoadError, one_of

logger = logging.getLogger(__name__)

SHAPES_DIR = pathlib.Path(__file__).resolve().parent / "shape_configs"
SUPPORTED_MODEL_TYPES = ("qwen2_5_vl", "qwen2_vl", "qwen3_vl")
_BLOCK = 1_000_003  # elements of the seeded random block (prime: rows of a tensor do not repeat in step)
# The published Qwen3-VL image processor (preprocessor_config.json): 16 px patches, 2x2 merge, 256^2..4096^2 px.
_IMAGE_PROCESSOR = {
    "qwen3_vl": dict(patch_size=16, temporal_patch_size=2, merge_size=2, image_mean=[0.5] * 3, image_std=[0.5] * 3,
                     size={"shortest_edge": 65536, "longest_edge": 16777216}),
    "qwen2_vl": dict(patch_size=14, temporal_patch_size=2, merge_size=2,
                     size={"shortest_edge": 56 * 56, "longest_edge": 28 * 28 * 1280}),
}
_IMAGE_PROCESSOR["qwen2_5_vl"] = _IMAGE_PROCESSOR["qwen2_vl"]


def shape_names() -> list[str]:
    """The shapes shipped with routedvlm (file names in `shape_configs/` without `.json`)."""
    return sorted(p.stem for p in SHAPES_DIR.glob("*.json"))


def is_shape_spec(spec) -> bool:
    """Whether `spec` names a shipped shape or a config.json file (as opposed to a checkpoint folder / hub id)."""
    spec = str(spec)
    return spec in shape_names() or (spec.endswith(".json") and pathlib.Path(spec).is_file())


def resolve_shape(spec) -> tuple[str, dict, str]:
    """(display name, config dict, source: the shipped shape's name, or the `config.json` path as given)."""
    spec = str(spec)
    path = SHAPES_DIR / f"{spec}.json" if spec in shape_names() else pathlib.Path(spec)
    if not path.is_file():
        raise ConfigError(f"The `--shape` value must be one of {one_of(shape_names())} or a config.json file. "
                          f"Got {spec!r} instead.")
    try:
        config = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"The shape file {str(path)!r} is not a readable JSON config ({exc}).") from exc
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ConfigError(f"The shape file {str(path)!r} must have a `model_type` of {one_of(SUPPORTED_MODEL_TYPES)}. "
                          f"Got {model_type!r} instead.")
    name = spec if spec in shape_names() else (path.parent.name if path.name == "config.json" else path.stem)
    return name, config, spec if spec in shape_names() else str(path)  # a shipped shape by name: no machine path


def config_dtype(config: dict) -> str:
    """The dtype a config was published in (text_config.dtype / torch_dtype), default bfloat16."""
    text = config.get("text_config") or {}
    for d in (text, config):
        for key in ("dtype", "torch_dtype"):
            if isinstance(d.get(key), str):
                return d[key]
    return "bfloat16"


def _hf_config(config: dict, tokenizer):
    """The transformers config of `config` with its special-token ids moved onto `tokenizer`'s ids."""
    from transformers import CONFIG_MAPPING

    cfg = json.loads(json.dumps(config))  # deep copy
    ids = {key: tokenizer.convert_tokens_to_ids(tok) for key, tok in (
        ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>"))}
    cfg.update(ids)
    cfg.setdefault("text_config", {}).update(
        bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    cfg.pop("architectures", None)
    cfg.pop("transformers_version", None)
    return CONFIG_MAPPING[cfg.pop("model_type")].from_dict(cfg)


def meta_model(config: dict, dtype, tokenizer):
    """The model of `config` with every parameter on the meta device (buffers are real and small)."""
    import torch
    from accelerate import init_empty_weights
    from transformers import AutoModelForImageTextToText

    from ..sides.local.side import torch_dtype as _dtype

    hf_config = _hf_config(config, tokenizer)
    with init_empty_weights(include_buffers=False):
        model = AutoModelForImageTextToText.from_config(hf_config, dtype=_dtype(dtype) or torch.bfloat16)
    model.tie_weights()  # inside the context each assignment registered a fresh meta copy: tie again
    return model.eval()


def _random_block(seed: int, std: float):
    import torch

    gen = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn(_BLOCK, generator=gen, dtype=torch.float32) * std


def _fill(param, block, offset: int) -> None:
    """Fill `param` in place with `block` (same dtype and device) repeated from `offset`."""
    flat = param.view(-1)
    rolled = block.roll(-offset) if offset else block
    for start in range(0, flat.numel(), rolled.numel()):
        chunk = flat[start:start + rolled.numel()]
        chunk.copy_(rolled[: chunk.numel()])


def _kind(module, name: str) -> str:
    cls = type(module).__name__
    if name == "bias":
        return "zeros"
    if "Norm" in cls:
        return "ones"
    return "random"


def materialize(model, device: str, seed: int = 0) -> None:
    """Allocate every meta parameter of `model` on `device` in its own dtype and fill it (seeded); move buffers.

    Tied parameters stay tied (one allocation). Random values: one seeded block of N(0, initializer_range) floats,
    cast once per dtype on the device, repeated over each tensor from an offset derived from its name.
    """
    import torch

    std = float(getattr(model.config.get_text_config(), "initializer_range", 0.02) or 0.02)
    block32 = _random_block(seed, std)
    blocks, done = {}, {}
    with torch.no_grad():
        for mod_name, module in model.named_modules():
            for name, param in list(module._parameters.items()):
                if param is None:
                    continue
                if id(param) in done:
                    module._parameters[name] = done[id(param)]
                    continue
                if not param.is_meta:
                    new = torch.nn.Parameter(param.data.to(device), requires_grad=False)
                else:
                    new = torch.nn.Parameter(torch.empty(param.shape, dtype=param.dtype, device=device),
                                             requires_grad=False)
                    kind = _kind(module, name)
                    if kind == "random":
                        key = (param.dtype, str(device))
                        if key not in blocks:
                            blocks[key] = block32.to(device=device, dtype=param.dtype)
                        digest = hashlib.sha256(f"{seed}:{mod_name}.{name}".encode()).digest()
                        _fill(new.data, blocks[key], int.from_bytes(digest[:4], "little") % _BLOCK)
                    else:
                        new.data.fill_(1.0 if kind == "ones" else 0.0)
                done[id(param)] = new
                module._parameters[name] = new
            for name, buf in list(module._buffers.items()):
                if buf is not None:
                    module._buffers[name] = buf.to(device)
    del blocks, block32


def shape_processor(model_type: str, tokenizer, template: str):
    """The PIL image processor + processor (no video processor) a shape of `model_type` is fed with."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from ..sides.local.processors import PROCESSOR_BY_MODEL_TYPE, without_video

    image_processor = Qwen2VLImageProcessorPil(**_IMAGE_PROCESSOR[model_type])
    cls = without_video(PROCESSOR_BY_MODEL_TYPE[model_type])
    return cls(image_processor=image_processor, tokenizer=tokenizer, chat_template=template)


def check_shape_memory(spec, settings=None, margin_gib: float = 0.0, device: str | None = None) -> dict:
    """The memory estimate of shape `spec` for the grid of `settings` on its device; raises when it does not fit."""
    from .shape_memory import check_fits, estimate_memory
    from ..tiny import build_tokenizer

    name, config, _ = resolve_shape(spec)
    device = device or (settings.device if settings is not None else "cpu")
    dtype = (settings.dtype if settings is not None else None) or config_dtype(config)
    estimate = estimate_memory(meta_model(config, dtype, build_tokenizer()), settings)
    check_fits(name, estimate, device, margin_gib)
    return estimate


def shape_vlm(spec, device: str = "cpu", dtype=None, *, seed: int = 0, settings=None, margin_gib: float = 0.0):
    """A `VLM` of the shape `spec` (shipped name or config.json path) with seeded random weights on `device`.

    dtype: None = the config's published dtype. settings: a `ProfileSettings` (sizes the KV cache and activation
    part of the memory check); margin_gib: memory to leave free beyond the estimate. Raises
    `InsufficientMemoryError` before allocating anything when the device has too little free memory.
    """
    from ..chat_templates import QWEN_HYBRID_THINKING_TEMPLATE
    from .shape_memory import check_fits, estimate_memory
    from ..tiny import build_tokenizer
    from ..sides.local.side import VLM, torch_dtype as _dtype

    name, config, source = resolve_shape(spec)
    dtype = _dtype(dtype or config_dtype(config))
    tokenizer = build_tokenizer()
    tokenizer.chat_template = QWEN_HYBRID_THINKING_TEMPLATE
    try:
        model = meta_model(config, dtype, tokenizer)
    except (ValueError, TypeError, KeyError) as exc:
        raise ModelLoadError(f"Cannot build a model from the shape {source!r}: {exc}") from exc
    estimate = estimate_memory(model, settings)
    check_fits(name, estimate, device, margin_gib)
    logger.info("building %s: %.2f B parameters, %.1f GiB of %s weights on %s (seeded random)",
                name, estimate["parameters"] / 1e9, estimate["weights_gib"], str(dtype).removeprefix("torch."), device)
    materialize(model, device, seed)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = None
    processor = shape_processor(config["model_type"], tokenizer, QWEN_HYBRID_THINKING_TEMPLATE)
    vlm = VLM(model, processor, tokenizer, name=name, style="hybrid")
    vlm.shape_info = {"shape": name, "source": source, "seed": seed, "memory_estimate": estimate,
                      "note": "random weights; special-token ids remapped onto a byte-level tokenizer"}
    return vlm
