"""`routedvlm profile --preset gpu-check` (`make gpu-check`): the paper's latency analysis at real sizes on one GPU.

Three steps, each printing progress: (1) profile the Qwen3-VL 2B and 8B shapes (bf16, seeded random weights) on the
paper's grid: vision, prefill and per-token decode with `torch.cuda.synchronize` around every time stamp; (2) the
escalation benchmark at those shapes (second stage from the cached prefix vs cold, `escalation.py`); (3) the
GPU-marked tests (`pytest -m gpu`, when run from a checkout on a CUDA device). One JSON (a profile.json, usable as
`--cost`, plus `escalation`, `gpu_tests` and `steps`) and the two plots go to runs/gpu-check/. Sized to finish in
well under 10 minutes on one H200-class GPU (estimate in `PRESETS`). Any grid flag given on the command line
overrides the preset, so the same path runs on a CPU with a tiny shape (tests).
"""
from __future__ import annotations

import logging
import os
import pathlib
import subprocess
import sys
import time

logger = logging.getLogger(__name__)

# Budget on one H200 with transformers' eager generate: ~25 ms per 8B decode step, ~20 ms per 2B step; decode runs
# 512 tokens at the reference image for 3 prompts x 2 repeats = 3,072 steps per model (~140 s for both), the other
# 21 calls per model are 1-token (~0.1 s each); build ~10 s per model; escalation ~10 s; tests ~1 min.
PRESETS = {
    "gpu-check": {
        "shapes": ["qwen3-vl-2b", "qwen3-vl-8b"], "device": "cuda", "dtype": "bfloat16",
        "image_sizes": [224, 448, 896], "prompt_tokens": [32, 256, 1024], "output_tokens": [1, 16, 64, 256, 512],
        "repeats": 2, "out": "runs/gpu-check/gpu-check.json", "plots_dir": "runs/gpu-check",
        "escalation": {"keep_tokens": 64, "answer_tokens": 16, "repeats": 5},
    },
}


def _step(steps: list, name: str, t0: float) -> None:
    steps.append({"step": name, "seconds": round(time.perf_counter() - t0, 1)})
    logger.info("[gpu-check] %s done in %.0f s", name, steps[-1]["seconds"])


def escalation_at_shapes(shapes: list, settings, params: dict) -> dict:
    """{shape name: measure_escalation(...)} at the reference image size of `settings`, one shape at a time."""
    from .escalation import measure_escalation
    from .env import free
    from .profiler import random_image
    from .shapes import shape_vlm

    out = {}
    for spec in shapes:
        vlm = shape_vlm(spec, settings.device, settings.dtype, seed=settings.seed, settings=settings)
        logger.info("[gpu-check] escalation on %s (K=%d, %d answer tokens, %d repeats)", vlm.name,
                    params["keep_tokens"], params["answer_tokens"], params["repeats"])
        out[vlm.name] = measure_escalation(vlm, random_image(settings.reference[0], settings.seed), **params)
        del vlm
        free(settings.device)
    return out


def gpu_tests(device: str, root: pathlib.Path | None = None, timeout: int = 600) -> dict:
    """Run `pytest -m gpu` from a checkout; skipped (with the reason) off CUDA or outside a checkout."""
    if not device.startswith("cuda"):
        return {"status": "skipped", "reason": f"device {device!r} is not a CUDA device"}
    root = pathlib.Path.cwd() if root is None else pathlib.Path(root)
    if not (root / "tests").is_dir():
        return {"status": "skipped", "reason": f"no tests/ folder under {root} (run from a repository checkout)"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "tests"]
    logger.info("[gpu-check] %s", " ".join(cmd[2:]))
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    try:
        res = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "command": " ".join(cmd), "timeout_s": timeout}
    summary = (res.stdout.strip().splitlines() or [""])[-1]
    return {"status": "passed" if res.returncode == 0 else "failed", "returncode": res.returncode,
            "command": " ".join(cmd), "summary": summary, "tail": res.stdout[-3000:] + res.stderr[-2000:]}


def run_gpu_check(settings, shapes: list, out: pathlib.Path, plots_dir: pathlib.Path, escalation: dict,
                  show_progress: bool = True, memory_margin_gib: float = 1.0) -> dict:
    """The three steps of the module docstring; writes `out` (JSON) and the plots, returns the JSON content."""
    from .env import write_json
    from .plots import plot_components, plot_crossover
    from .profiler import run_profile

    steps, t_all = [], time.perf_counter()
    logger.info("[gpu-check] 1/3 profiling %s on %s (%s): images %s, prompts %s, outputs %s, %d repeats",
                ", ".join(shapes), settings.device, settings.dtype, settings.image_sizes, settings.prompt_tokens,
                settings.output_tokens, settings.repeats)
    t0 = time.perf_counter()
    result = run_profile([], settings, show_progress=show_progress, shapes=shapes, memory_margin_gib=memory_margin_gib)
    _step(steps, "profile", t0)
    logger.info("[gpu-check] 2/3 escalation at real shapes (cache reuse vs cold second stage)")
    t0 = time.perf_counter()
    result["escalation"] = escalation_at_shapes(shapes, settings, escalation)
    _step(steps, "escalation", t0)
    logger.info("[gpu-check] 3/3 GPU-marked tests")
    t0 = time.perf_counter()
    result["gpu_tests"] = gpu_tests(settings.device)
    _step(steps, "gpu_tests", t0)
    result.update(preset="gpu-check", steps=steps, seconds=round(time.perf_counter() - t_all, 1))
    write_json(out, result)
    result["written"] = [str(out), str(plot_components(result, plots_dir / "components.png")),
                         str(plot_crossover(result, plots_dir / "crossover.png"))]
    return result


def summary_lines(result: dict) -> list[str]:
    """Escalation and test lines for the console (the profile summary is printed by the CLI)."""
    lines = []
    for name, e in result.get("escalation", {}).items():
        lines.append(f"escalation {name}: reuse {e['reuse_ms_median']:.1f} ms vs cold {e['cold_ms_median']:.1f} ms "
                     f"({e['speedup_cold_over_reuse']:.2f}x; prefill {e['reuse_prefill_tokens']} vs "
                     f"{e['cold_prefill_tokens']} tokens, {e['image_tokens']} image tokens)")
    tests = result.get("gpu_tests", {})
    lines.append(f"gpu tests: {tests.get('status')} {tests.get('summary') or tests.get('reason') or ''}".rstrip())
    lines.append(f"gpu-check took {result.get('seconds', 0):.0f} s: "
                 + ", ".join(f"{s['step']} {s['seconds']:.0f} s" for s in result.get("steps", [])))
    return lines
