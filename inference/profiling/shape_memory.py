"""How much memory a model needs before it is built, and whether the device has it (refuse instead of swapping).

`estimate_memory(meta_model, settings)` adds up the weights (exact: the parameters of the model built on the meta
device, tied ones once), the KV cache at the longest context of the profile grid, the largest activations of one
prefill and of the vision encoder on the largest image, and a fixed runtime allowance. Attention scores are counted as
transformers' eager attention holds them: the Q.K^T product in the model dtype plus its float32 softmax (an upper
bound: fused SDPA kernels on CUDA hold neither). `check_fits` compares it
with the free memory of the device (CPU: `MemAvailable` of /proc/meminfo; CUDA: `torch.cuda.mem_get_info`).
"""
from __future__ import annotations

import math

from routedvlm.errors import InsufficientMemoryError

GIB = 2**30
RUNTIME_GIB = 1.0  # interpreter, torch, transformers, allocator slack (measured ~0.6 GiB on CPU)
TEMPLATE_TOKENS = 64  # chat template + vision markers around the question
SOFTMAX_BYTES = 4  # eager attention: softmax(..., dtype=torch.float32) of the scores


def attention_score_bytes(heads: int, tokens: int, item: int) -> int:
    """Bytes of one layer's attention scores over `tokens` x `tokens`: the product in the model dtype (`item`
    bytes) and its float32 softmax, alive together."""
    return heads * tokens * tokens * (item + SOFTMAX_BYTES)


def _unique_params(model):
    seen, out = set(), []
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            out.append(p)
    return out


def image_tokens(config, width: int, height: int) -> tuple[int, int]:
    """(vision patches, LM image tokens) of one image after the Qwen-VL resize (min 256^2, max 4096^2 pixels)."""
    vision = config.vision_config
    patch, merge = int(vision.patch_size), int(getattr(vision, "spatial_merge_size", 2))
    factor = patch * merge
    area = min(max(width * height, 256 * 256), 4096 * 4096)
    side_h = max(factor, round(math.sqrt(area * height / width) / factor) * factor)
    side_w = max(factor, round(math.sqrt(area * width / height) / factor) * factor)
    patches = (side_h // patch) * (side_w // patch)
    return patches, patches // (merge * merge)


def _grid(settings):
    from .inputs import image_dims
    from .settings import ProfileSettings

    settings = settings or ProfileSettings()
    dims = [image_dims(s) for s in settings.image_sizes]
    return max(dims, key=lambda d: d[0] * d[1]), max(settings.prompt_tokens), max(settings.output_tokens)


def estimate_memory(model, settings=None) -> dict:
    """Bytes the model needs on its device for the grid of `settings` (a ProfileSettings; default grid if None).

    Returns {parameters, weights_gib, kv_cache_gib, activations_gib, runtime_gib, total_gib, max_context}.
    """
    params = _unique_params(model)
    weights = sum(p.numel() * p.element_size() for p in params)
    item = params[0].element_size() if params else 2
    text, vision = model.config.get_text_config(), model.config.vision_config
    (w, h), prompt, output = _grid(settings)
    patches, img_tokens = image_tokens(model.config, w, h)
    context = img_tokens + prompt + TEMPLATE_TOKENS + output
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    kv = 2 * text.num_hidden_layers * text.num_key_value_heads * head_dim * item * context
    prefill = context * (4 * text.hidden_size + 3 * text.intermediate_size) * item
    prefill += attention_score_bytes(text.num_attention_heads, context, item) + 4 * text.vocab_size
    v_heads = getattr(vision, "num_heads", 16)
    vis = patches * (4 * vision.hidden_size + 2 * getattr(vision, "intermediate_size", 4 * vision.hidden_size)) * item
    vis += attention_score_bytes(v_heads, patches, item)
    out = {"parameters": sum(p.numel() for p in params), "weights_gib": weights / GIB, "kv_cache_gib": kv / GIB,
           "activations_gib": max(prefill, vis) / GIB, "runtime_gib": RUNTIME_GIB, "max_context": context}
    out["total_gib"] = out["weights_gib"] + out["kv_cache_gib"] + out["activations_gib"] + RUNTIME_GIB
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}


def available_gib(device: str) -> tuple[float | None, str]:
    """(free GiB on `device`, where the number comes from); (None, reason) when it cannot be told."""
    if device.startswith("cuda"):
        import torch

        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return free / GIB, "torch.cuda.mem_get_info"
    if device.startswith("cpu"):
        try:
            with open("/proc/meminfo") as fh:
                for line in fh:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024 / GIB, "MemAvailable in /proc/meminfo"
        except OSError:
            pass
        return None, "no /proc/meminfo"
    return None, f"free memory of {device!r} is not known"


def check_fits(name: str, estimate: dict, device: str, margin_gib: float = 0.0, available=None) -> None:
    """Raise InsufficientMemoryError when `estimate` (+ margin) exceeds the free memory of `device`."""
    free, source = available if available is not None else available_gib(device)
    need = estimate["total_gib"] + max(margin_gib, 0.0)
    if free is None or need <= free:
        return
    parts = (f"{estimate['weights_gib']:.1f} GiB weights, {estimate['kv_cache_gib']:.2f} GiB KV cache at "
             f"{estimate['max_context']:,} tokens, {estimate['activations_gib']:.2f} GiB activations, "
             f"{estimate['runtime_gib']:.1f} GiB runtime" + (f", {margin_gib:.1f} GiB margin" if margin_gib > 0 else ""))
    raise InsufficientMemoryError(
        f"The shape {name!r} needs about {need:.1f} GiB on {device} ({parts}) but only {free:.1f} GiB is free "
        f"({source}). Nothing was allocated. Profile a smaller shape, shrink the grid (--image-sizes, "
        "--prompt-tokens, --output-tokens), free memory, or run it on a larger device (--device cuda).")
