"""The `routedvlm` metadata of a labels file written by the labeller: models (with revisions), versions, time.

A model's revision is the hub commit when the checkpoint is a hub snapshot (`.../snapshots/<commit>/` or a hub id
found in the local cache), else `sha256:` over the names and bytes of its weight files.
"""
from __future__ import annotations

import logging
import platform
import re
from importlib import metadata as _md
from pathlib import Path

from routedvlm.router.checkpoints import config_hash, portable_path, weights_hash

log = logging.getLogger(__name__)
EXECUTION_MODE = "one-stage+two-stage"
REMOTE_MEASUREMENT = ("per-sample cache_salt namespaces: standalone calls cold; two-stage calls reuse only the "
                      "large_direct prefix (server-reported cached tokens); one-stage transfers measured cold too "
                      "unless a cost model prices them (inference/sides/http/remote_prompt.py)")
LIBRARIES = ("routedvlm", "torch", "transformers", "tokenizers", "datasets", "numpy", "pandas", "pyarrow", "pillow")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def _snapshot_commit(path: Path) -> str | None:
    parts = path.resolve().parts
    for parent, name in zip(parts, parts[1:]):
        if parent == "snapshots" and _COMMIT.match(name):
            return name
    return None


def _hub_cache_folder(repo_id: str) -> Path | None:
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # noqa: BLE001 - an unknown cache layout only loses the revision
        return None
    return Path(found).parent if isinstance(found, str) else None


def model_revision(name_or_path) -> str | None:
    """The hub commit of a snapshot folder or cached hub id, else a hash of the weight files, else None."""
    path = Path(str(name_or_path)).expanduser()
    if not path.exists():
        path = _hub_cache_folder(str(name_or_path))
        if path is None:
            return None
    return _snapshot_commit(path) or weights_hash(path)


def describe_side(vlm) -> dict:
    """`ModelSide.describe()` as recorded: the weights' revision in place of the folder it is read from, and a
    checkpoint this process loaded by what holds on any machine (weights and config hashes) and its path as given
    (`portable_path`: relative to the working folder when under it); readers find it with `locate_checkpoint`."""
    info = vlm.describe()
    weights, checkpoint = info.pop("weights", None), info.pop("checkpoint", None)
    keys = list(info)
    at = keys.index("dtype") if "dtype" in keys else len(keys)
    out = {**{k: info[k] for k in keys[:at]}, "revision": model_revision(weights) if weights else None,
           **{k: info[k] for k in keys[at:]}}
    if checkpoint is not None:
        path = Path(str(checkpoint)).expanduser()
        local = path.is_dir()
        out.update(name=portable_path(checkpoint), weights_hash=weights_hash(path) if local else None,
                   config_hash=config_hash(path) if local else None)
    return out


def side_info(vlm) -> dict:
    """One side's checkpoints (or servers and model ids) and which one served which mode (direct / reason)."""
    from routedvlm.errors import ModeUnavailableError

    try:
        reason_side = vlm.reasoning_side()
        reason = {"checkpoint": portable_path(reason_side.name), "mode": reason_side.mode_name("reason")}
    except ModeUnavailableError:
        reason = None
    return {
        **describe_side(vlm),
        "reasoner": describe_side(vlm.reasoner) if vlm.reasoner is not None else None,
        "style": vlm.style,
        "modes": {"direct": {"checkpoint": portable_path(vlm.name), "mode": vlm.mode_name("direct")}, "reason": reason},
    }


def scale_info(cfg) -> dict:
    """How a run spreads its samples: `concurrency`, `requests_in_flight` (per model; 1 = standalone wall times),
    `runner` ('serial', 'threads' or 'ray') and, for Ray, its address, workers and GPUs per worker."""
    from .config import every_side, requests_in_flight

    info = {"concurrency": int(cfg.concurrency), "requests_in_flight": requests_in_flight(cfg, every_side(cfg, "batching")),
            "runner": "ray" if cfg.ray else "threads" if int(cfg.concurrency) > 1 else "serial"}
    if cfg.ray:
        info["ray"] = {"address": cfg.ray_address, "num_workers": cfg.num_workers,
                       "gpus_per_worker": float(cfg.gpus_per_worker)}
    return info


def library_versions() -> dict:
    out = {"python": platform.python_version()}
    for lib in LIBRARIES:
        try:
            out[lib] = _md.version(lib)
        except _md.PackageNotFoundError:
            out[lib] = None
    return out


def build_metadata(cfg, pipe, device: str, source, cost_meta: dict) -> dict:
    """The run's part of the `routedvlm` metadata (counts, scorers and the content hash are added at the end)."""
    from dataclasses import asdict

    from routedvlm.router.provenance import now_iso

    from ..adapters import get_adapter
    from .models import meaning_of, state_of

    models = {alias: side_info(side) for alias, side in pipe.sides.items()}
    remote = [alias for alias in models if "server" in models[alias]]  # sides measured over HTTP
    ladder = {"ladder": list(pipe.aliases)} if len(pipe.aliases) > 2 else {}
    extra = {"remote_measurement": REMOTE_MEASUREMENT, "remote_sides": remote} if remote else {}
    return {
        **extra, **ladder, "models": models, "selector": cfg.selector, "k_grid": list(cfg.k_grid), "strategies": list(cfg.strategies),
        "candidates": list(cfg.strategies), "prompts": pipe.large.prompts.to_dict(), "generation": asdict(pipe.config),
        "prompt_template": get_adapter(source.adapter).template(cfg.prompt_template).to_dict(),
        "threshold": cfg.threshold, "execution_mode": EXECUTION_MODE, **cost_meta, **scale_info(cfg),
        "torch_threads": _torch_threads(),
        "libraries": library_versions(), "created_at": now_iso(), "sample_source": source.to_dict(), "shard": cfg.shard,
        "run_settings": cfg.settings(), **({"encoder": meaning_of(cfg).spec()} if cfg.encoder else {}),
        **({"state": state_of(cfg).spec()} if cfg.state_dims else {}),
    }


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()
