"""Where a profile ran and what it used: hardware, library versions, device checks and synchronisation, memory.

Split from `profiler.py`; pure bookkeeping around the measurements (torch is imported inside the functions).
"""
from __future__ import annotations

import json
import os
import pathlib
import platform


def hardware_info(device: str) -> dict:
    """CPU model, cores, torch threads and, on CUDA, the GPU name and memory."""
    import torch

    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), cpu)
    except OSError:
        pass
    info = {"cpu": cpu, "cpu_cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "platform": platform.platform(), "device": device, "gpu": None}
    if device.startswith("cuda") and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.device(device))
        info.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1))
    return info


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("routedvlm", "torch", "transformers", "numpy"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def check_device(device: str) -> None:
    import torch

    from routedvlm.errors import ConfigError

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"The `device` setting is {device!r} but this torch has no CUDA device. "
                          "Pass --device cpu, or install a CUDA build of torch on a machine with a GPU.")
    if not device.startswith(("cpu", "cuda", "mps", "xpu")):
        raise ConfigError(f"The `device` setting must be a torch device such as 'cpu', 'cuda' or 'cuda:1'. "
                          f"Got {device!r} instead.")


def free(device: str) -> None:
    import gc

    import torch

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def sync(device: str):
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(torch.device(device))


def resources(device: str, seconds: float) -> dict:
    """Wall time of one model's profile and the memory it used (process peak RSS; on CUDA the allocator peak)."""
    import resource

    import torch

    out = {"seconds": round(seconds, 1),
           "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)}
    if device.startswith("cuda"):
        out["cuda_peak_gib"] = round(torch.cuda.max_memory_allocated(torch.device(device)) / 2**30, 2)
    return out


def write_json(path, data: dict) -> pathlib.Path:
    """Write `data` as JSON to `path` atomically (a temporary file, then a rename)."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)
    return path
