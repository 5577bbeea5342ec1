"""What `make gpu-check` costs, counted on the CPU: tiny stand-ins of the shapes, the work each step does, the GPU time.

`tiny_config(config)` shrinks a Qwen3-VL shape (2 text layers, 2 vision blocks; the published vocabulary, patch and
merge sizes, so token counts and the logits width are the real ones). `Counter` hooks a built model and counts what
runs on the device: vision-encoder calls and patches, prefill forwards and tokens, decode forwards (one token each).
The gpu-check records these counts per step on every run (CPU or GPU), so a dry run on the CPU, which makes the same
calls at tiny sizes, predicts the call count of the real run; `estimate_seconds` turns the counts into GPU time with
the per-unit costs of `ASSUMED` (assumptions, stated in docs/gpu.md, not measurements).
"""
from __future__ import annotations

import json
import pathlib

from routedvlm.errors import ConfigError

# Assumed cost per unit on one H200 with transformers' eager bf16 generate (not measured here: no GPU was lent).
# decode_ms: one decode forward (eager generate is launch-bound: ~36 layers x ~15 kernels, not the ~4 ms the weights
# take to stream at 4.3 TB/s); prefill/vision: compute-bound at ~300 TFLOP/s effective (2 x parameters FLOPs a token);
# build_s: allocating and filling the weights on the GPU; meta_build_s: a model on the meta device (memory check).
ASSUMED = {
    "qwen3-vl-2b": {"decode_ms": 20.0, "prefill_ms_per_token": 0.015, "vision_ms_per_patch": 0.005, "build_s": 5.0},
    "qwen3-vl-4b": {"decode_ms": 22.0, "prefill_ms_per_token": 0.03, "vision_ms_per_patch": 0.005, "build_s": 8.0},
    "qwen3-vl-8b": {"decode_ms": 25.0, "prefill_ms_per_token": 0.06, "vision_ms_per_patch": 0.005, "build_s": 12.0},
}
ASSUMED_DEFAULT = ASSUMED["qwen3-vl-8b"]
META_BUILD_S = 2.0  # one model constructed on the meta device (CPU work, same on every machine)
CALL_OVERHEAD_MS = 15.0  # processor + generate set-up per call (CPU side)
TEST_S = 20.0  # one GPU-marked test (tiny models, CUDA start-up shared)
TESTS_START_S = 30.0  # pytest start, imports and CUDA context for the GPU tests


def tiny_config(config: dict) -> dict:
    """`config` (a Qwen3-VL shape) at tiny sizes: same structure, vocabulary, patch and merge sizes."""
    if config.get("model_type") != "qwen3_vl":
        raise ConfigError(f"The dry run builds tiny Qwen3-VL stand-ins; the `model_type` of a shape must be 'qwen3_vl'. "
                          f"Got {config.get('model_type')!r} instead.")
    cfg = json.loads(json.dumps(config))
    cfg["text_config"].update(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                              head_dim=16, num_hidden_layers=2)
    cfg["text_config"].setdefault("rope_scaling", {})["mrope_section"] = [4, 2, 2]  # sums to head_dim / 2
    cfg["vision_config"].update(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                                deepstack_visual_indexes=[1])
    return cfg


def write_tiny_shapes(shapes: list, folder) -> list:
    """Tiny config.json stand-ins of `shapes` in `folder` (named like the shapes): paths to pass as --shape."""
    from .shapes import resolve_shape

    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for spec in shapes:
        name, config, _ = resolve_shape(spec)
        path = folder / f"{name}.json"
        path.write_text(json.dumps(tiny_config(config), indent=1))
        out.append(str(path))
    return out


class Counter:
    """Counts device work of hooked models: {vision_calls, vision_patches, prefill_forwards, prefill_tokens,
    decode_forwards}. `take()` returns the counts since the last take and resets them."""

    KEYS = ("vision_calls", "vision_patches", "prefill_forwards", "prefill_tokens", "decode_forwards")

    def __init__(self):
        self.counts = dict.fromkeys(self.KEYS, 0)
        self.handles = []

    def hook(self, model) -> None:
        """Count the forwards of `model` (a Qwen-VL generation model) and of its vision encoder."""
        self.handles.append(model.register_forward_pre_hook(self._text, with_kwargs=True))
        visual = getattr(getattr(model, "model", None), "visual", None)
        if visual is not None:
            self.handles.append(visual.register_forward_pre_hook(self._vision, with_kwargs=True))

    def unhook(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []

    def _text(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            ids = kwargs.get("inputs_embeds")
        n = int(ids.shape[1]) if ids is not None else 0
        if n == 1:
            self.counts["decode_forwards"] += 1
        else:
            self.counts["prefill_forwards"] += 1
            self.counts["prefill_tokens"] += n

    def _vision(self, module, args, kwargs):
        pixels = kwargs.get("hidden_states", args[0] if args else None)
        self.counts["vision_calls"] += 1
        self.counts["vision_patches"] += int(pixels.shape[0]) if pixels is not None else 0

    def take(self) -> dict:
        out, self.counts = self.counts, dict.fromkeys(self.KEYS, 0)
        return out


def step_seconds(step: dict) -> float:
    """Assumed GPU seconds of one recorded step (its `kind`, `shape` and `counts`), from ASSUMED."""
    kind, counts = step.get("kind"), step.get("counts") or {}
    a = ASSUMED.get(step.get("shape"), ASSUMED_DEFAULT)
    if kind == "build":
        return a["build_s"] + META_BUILD_S * counts.get("meta_builds", 0)
    if kind == "memory_check":
        return META_BUILD_S * counts.get("meta_builds", 0)
    if kind == "tests":
        return TESTS_START_S + TEST_S * counts.get("tests", 0)
    if kind in ("profile", "escalation"):
        calls = counts.get("prefill_forwards", 0)
        ms = (counts.get("decode_forwards", 0) * a["decode_ms"] + counts.get("prefill_tokens", 0)
              * a["prefill_ms_per_token"] + counts.get("vision_patches", 0) * a["vision_ms_per_patch"]
              + calls * CALL_OVERHEAD_MS)
        return ms / 1000
    return 0.0


def estimate_seconds(steps: list) -> dict:
    """{step name: assumed GPU seconds} and "total" for the recorded steps of a (dry) run."""
    out = {s["step"]: round(step_seconds(s), 1) for s in steps}
    out["total"] = round(sum(out.values()), 1)
    return out
