"""Measure where a VLM's latency goes on simulated inputs, and fit the latency model of `latency_model.py`.

For each model and each (image size, prompt length, repeat): a random image and a synthetic question of that many
tokens go through the processor (timed: `preprocess`), then `generation.timed_generate` times the vision encoder,
the prefill and every decode step (on a GPU it synchronises before each time stamp). Decode runs to the largest
output-token setting (`min_new_tokens`, so random weights cannot stop early) at the reference image size only;
other sizes generate one token. A warm-up call per image size comes first and is not recorded.
What it leaves out: batching, several images per prompt, and speculative or paged serving engines.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import statistics
import time

from .latency_model import decode_points, end_to_end_mape, fit_components  # noqa: F401
from .inputs import check_image_sizes, image_area, image_dims, random_image, synthetic_prompt  # noqa: F401
from .env import check_device, free, hardware_info, resources, sync, versions, write_json
from .settings import CLOCKS, ProfileSettings  # noqa: F401

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1

def _image_token_id(model):
    cfg = model.config
    for key in ("image_token_id", "image_token_index"):
        if getattr(cfg, key, None) is not None:
            return getattr(cfg, key)
    return None


def _one_call(vlm, image, question: str, n_out: int, device: str) -> dict:
    """Preprocess + timed generation of exactly `n_out` tokens; returns the measured times and token counts."""
    from ..sides.local.generation import now, timed_generate

    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
    t0 = now()
    inputs = vlm.encode(image, vlm.render(messages, "direct"))
    sync(device)
    pre_ms = (now() - t0) * 1000
    tid = _image_token_id(vlm.model)
    n_image = int((inputs["input_ids"] == tid).sum()) if tid is not None else 0
    gen = timed_generate(vlm.model, inputs, max_new_tokens=n_out, min_new_tokens=n_out)
    return {"preprocess_ms": pre_ms, "image_tokens": n_image, "gen": gen}


def _record(meas: dict, call: dict, size: int, prompt: int, rep: int, output_grid: list) -> None:
    gen = call["gen"]
    key = {"image_size": size, "prompt_tokens": prompt, "repeat": rep}
    meas["preprocess"].append({**key, "megapixels": image_area(size) / 1e6, "ms": round(call["preprocess_ms"], 4)})
    meas["vision"].append({**key, "image_tokens": call["image_tokens"], "ms": round(gen.vision_ms, 4)})
    meas["prefill"].append({**key, "tokens": gen.prefill_tokens, "ms": round(gen.prefill_ms, 4)})
    times = gen.token_times_ms
    if len(times) > 1:
        steps = [round(b - a, 4) for a, b in zip(times, times[1:])]
        meas["decode"].append({**key, "context_start": gen.prefill_tokens, "step_ms": steps})
    for n in output_grid:
        if n <= len(times):
            meas["end_to_end"].append({**key, "output_tokens": n,
                                       "ms": round(gen.vision_ms + gen.prefill_ms + times[n - 1], 4)})


def measure_model(vlm, settings: ProfileSettings, progress=None) -> dict:
    """Raw measurements of one loaded `VLM` over the settings' grid (see the module docstring), timed by its clock."""
    from ..sides.local.generation import clock

    with clock(CLOCKS[settings.clock]):
        return _measure(vlm, settings, progress)


def _measure(vlm, settings: ProfileSettings, progress=None) -> dict:
    ref_size, ref_prompt = settings.reference
    n_dec = max(settings.output_tokens)
    questions = {p: synthetic_prompt(vlm.tokenizer, p) for p in settings.prompt_tokens}
    images = {s: random_image(s, settings.seed + i) for i, s in enumerate(settings.image_sizes)}
    for size in settings.image_sizes if settings.warmup else ():  # allocator, kernels, lazy init; not recorded
        _one_call(vlm, images[size], questions[ref_prompt], 2, settings.device)
        if progress is not None:
            progress.update(1)
    meas = {k: [] for k in ("preprocess", "vision", "prefill", "decode", "end_to_end")}
    for rep in range(settings.repeats):
        for size in settings.image_sizes:
            for prompt in settings.prompt_tokens:
                n_out = n_dec if size == ref_size else 1
                call = _one_call(vlm, images[size], questions[prompt], n_out, settings.device)
                _record(meas, call, size, prompt, rep, settings.output_tokens)
                if progress is not None:
                    progress.update(1)
    return meas


def _reference(meas: dict, settings: ProfileSettings) -> dict:
    size, prompt = settings.reference
    rows = [r for r in meas["prefill"] if r["image_size"] == size and r["prompt_tokens"] == prompt]
    vis = [r for r in meas["vision"] if r["image_size"] == size and r["prompt_tokens"] == prompt]
    return {"image_size": size, "prompt_tokens": prompt,
            "prefill_tokens": round(statistics.fmean(r["tokens"] for r in rows)),
            "image_tokens": round(statistics.fmean(r["image_tokens"] for r in vis))}


def model_entry(vlm, path: str, settings: ProfileSettings, progress=None) -> dict:
    """Everything profile.json holds about one model: identity (its path as `portable_path` records it), raw
    measurements, fit, reference input."""
    from routedvlm.router.checkpoints import portable_path

    meas = measure_model(vlm, settings, progress)
    fit = fit_components(dict(meas, decode=decode_points(meas["decode"])))
    image_tokens = {str(r["image_size"]): r["image_tokens"] for r in meas["vision"]}
    return {
        "path": portable_path(path), "parameters": sum(p.numel() for p in vlm.model.parameters()),
        "model_type": vlm.model.config.model_type, "dtype": str(next(vlm.model.parameters()).dtype).removeprefix("torch."),
        "image_tokens": image_tokens, "reference": _reference(meas, settings), "fit": fit,
        "end_to_end_mape": end_to_end_mape(meas, fit), "measurements": meas,
    }


def _names(paths: list, shapes: list = ()) -> list:
    """Display names: folder basename, hub id or a server model's id (then shape names), made unique with a #2, #3
    suffix."""
    from ..sides.kinds import side_kind
    from .remote import parse_remote
    from .shapes import resolve_shape

    def base(p):
        p = str(p).rstrip("/")
        return parse_remote(p)[1] if side_kind(p).remote else os.path.basename(p) if os.path.isdir(p) else p

    out = []
    for name in [base(p) for p in paths] + [resolve_shape(s)[0] for s in shapes]:
        k, cand = 2, name
        while cand in out:
            cand, k = f"{name}#{k}", k + 1
        out.append(cand)
    return out


def _load(kind: str, spec, settings: ProfileSettings, margin_gib: float = 0.0):
    """The VLM of one profiled model: a checkpoint (`kind` "model") or a shape with random weights ("shape")."""
    from ..sides import load_side

    if kind == "shape":
        from .shapes import shape_vlm

        return shape_vlm(spec, settings.device, settings.dtype, seed=settings.seed, settings=settings,
                         margin_gib=margin_gib)
    return load_side(spec, device=settings.device, dtype=settings.dtype)


def _profile_local(kind: str, spec, settings: ProfileSettings, bar, margin_gib: float) -> dict:
    """Load, measure and free one local model or shape: its profile.json entry, with the time and memory it took."""
    t0 = time.perf_counter()
    vlm = _load(kind, spec, settings, margin_gib)
    built = time.perf_counter() - t0
    if settings.device.startswith("cuda"):
        import torch

        torch.cuda.reset_peak_memory_stats(torch.device(settings.device))
    entry = model_entry(vlm, str(getattr(vlm, "shape_info", {}).get("source", spec)), settings, bar)
    if hasattr(vlm, "shape_info"):
        entry["shape"] = vlm.shape_info
    entry.update(resources(settings.device, time.perf_counter() - t0), load_seconds=round(built, 1))
    del vlm
    free(settings.device)
    return entry


def assemble(settings: ProfileSettings, entries: dict, hardware: dict, crossovers: bool = True) -> dict:
    """The profile.json content for the measured `entries` ({name: model_entry})."""
    from routedvlm.router.provenance import now_iso

    from .crossover import crossover_points

    profile = {
        "format_version": FORMAT_VERSION, "tool": "routedvlm profile",
        "created": now_iso(),
        "settings": dataclasses.asdict(settings), "hardware": hardware, "versions": versions(),
        "models": entries,
    }
    profile["crossovers"] = crossover_points(profile) if crossovers and len(entries) > 1 else []
    return profile


def run_profile(models: list, settings: ProfileSettings, show_progress: bool = True, shapes: list = (),
                memory_margin_gib: float = 0.0, api_key: str | None = None, partial_path=None) -> dict:
    """Profile every model (path, hub id, or `<base_url>#<model id>` of a server: remote.py), then every
    shape (name or config.json, random weights), in turn.

    Returns the profile.json content, crossovers included. Each model is freed before the next one is built. Every
    shape's memory is checked before anything runs and again when it is built: refused (InsufficientMemoryError)
    unless its estimate + `memory_margin_gib` fits the free memory. `partial_path`: after each model, the profile
    so far is written there (a long run that fails or is stopped keeps what it measured).
    """
    from tqdm.auto import tqdm

    from ..sides.kinds import side_kind
    from .remote import remote_entry
    from .shapes import check_shape_memory

    specs = [("remote" if side_kind(str(m)).remote else "model", m) for m in models] + [("shape", s) for s in shapes]
    local = any(kind != "remote" for kind, _ in specs)
    if local:
        check_device(settings.device)
    for spec in shapes:
        check_shape_memory(spec, settings, memory_margin_gib)

    def hardware() -> dict:
        return hardware_info(settings.device) if local else {"device": "remote", "servers": sorted(
            {e["remote"]["base_url"] for e in entries.values() if e.get("remote")})}

    calls = settings.repeats * len(settings.prompt_tokens) + (1 if settings.warmup else 0)
    bar = tqdm(total=len(settings.image_sizes) * calls * len(specs), desc="profile", unit="call",
               disable=not show_progress)
    entries = {}
    try:
        for name, (kind, spec) in zip(_names(models, shapes), specs):
            bar.set_postfix_str(name)
            if kind == "remote":
                entries[name] = remote_entry(str(spec), settings, bar, api_key=api_key)
            else:
                entries[name] = _profile_local(kind, spec, settings, bar, memory_margin_gib)
            logger.info("profiled %s: %s", name, {c: round(f["slope"], 5) for c, f in entries[name]["fit"].items()})
            if partial_path is not None:
                write_json(partial_path, assemble(settings, entries, hardware(), crossovers=False))
    finally:
        bar.close()
    return assemble(settings, entries, hardware())
