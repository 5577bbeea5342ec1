"""Checkpoint identity and location: what names a model folder on any machine, and how a recorded one is found again.

A model is named by what holds on another machine — the content hash of its weight files (`weights_hash`, the
labels' `revision` format) and of its config (`config_hash`) — plus the path as it was given (`portable_path`:
relative to the working folder when it was under it). `locate_checkpoint` finds the folder again: the one given
now (a CLI flag or argument), the recorded path when it exists with those weights, or a shipped toy checkpoint
with the same weights; otherwise one line naming the hash and the flag.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

from routedvlm.errors import ConfigError

log = logging.getLogger(__name__)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


def weights_hash(folder) -> str | None:
    """`sha256:<hex>` over the sorted weight files' relative names and bytes; None when the folder has none."""
    folder = Path(folder)
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in WEIGHT_SUFFIXES)
    if not files:
        return None
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(folder)).encode() + b"\x00")
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 22), b""):
                h.update(chunk)
    return "sha256:" + h.hexdigest()


def config_hash(folder) -> str | None:
    """`sha256:<hex>` of the folder's config.json as canonical JSON (sorted keys); None when there is none."""
    path = Path(folder) / "config.json"
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return "sha256:" + hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def portable_path(path) -> str:
    """`path` as recorded in files that travel: relative (POSIX) to the working folder when it lies under it, else
    as given. `None`/'' stay as they are; strings that are not local paths (URLs, hub ids) are unchanged."""
    if path is None or str(path) == "":
        return path
    text = str(path)
    if text.startswith("sqlite:///"):  # an MLflow store: sqlite:///relative or sqlite:////absolute
        return "sqlite:///" + portable_path(text[len("sqlite:///"):])
    if "://" in text or "#" in text:
        return text
    p = Path(text).expanduser()
    if not p.is_absolute():
        return p.as_posix()
    try:
        return Path(os.path.relpath(p.resolve(), Path.cwd().resolve())).as_posix() \
            if p.resolve().is_relative_to(Path.cwd().resolve()) else text
    except (OSError, ValueError):
        return text


def shipped_checkpoints() -> list[Path]:
    """The toy checkpoint folders shipped with the package (`routedvlm/data/toyworld/checkpoints/*`), found by
    location and not by import (router imports none of the other packages): in a wheel and in an editable
    install of this repository both, that folder sits at `<parent of router>/data/toyworld/checkpoints`."""
    root = Path(__file__).resolve().parent.parent / "data" / "toyworld" / "checkpoints"
    return sorted(p for p in root.iterdir() if (p / "config.json").is_file()) if root.is_dir() else []


def _short(digest: str | None) -> str:
    return "unknown weights" if not digest else f"weights {digest[:19]}…"


def recorded_weights(info: dict) -> str | None:
    """The weights hash a labels `models.<side>` entry records: `weights_hash`, else a `revision` that is one
    (`sha256:...`; a hub commit is not)."""
    revision = info.get("revision")
    return info.get("weights_hash") or (revision if isinstance(revision, str) and revision.startswith("sha256:")
                                        else None)


def locate_checkpoint(recorded_path, expected_hash: str | None, *, given=None, flag: str, what: str,
                      extra=(), env: str | None = None, mismatch: str = "warn") -> Path:
    """The local folder of a model an artifact recorded (as `recorded_path` with `expected_hash`), in this order:
    `given` (what the user passes now; it must be a folder), the `env` variable, the recorded path when it exists
    and holds those weights, any of `extra` folders (e.g. the model already loaded beside it) or the shipped toy
    checkpoints whose weights hash equals `expected_hash`. Raises ConfigError naming the hash and `flag` when
    nothing matches. A given folder with other weights is used with a warning, or refused (ConfigError) with
    `mismatch="raise"` when only identical weights will do; every other folder is returned only when its weights
    hash equals `expected_hash`, so callers need not hash it again.
    """
    chosen = given or (os.environ.get(env) if env else None)
    source = flag if given else f"${env}"
    if chosen:
        folder = Path(str(chosen)).expanduser()
        if not folder.is_dir():
            raise ConfigError(f"{what} must be a local checkpoint folder; {str(chosen)!r} (from {source}) does not "
                              f"exist{' (it looks like a server URL)' if '://' in str(chosen) else ''}. "
                              f"Pass {flag} with the folder that holds {_short(expected_hash)}.")
        found = weights_hash(folder)
        if expected_hash and found != expected_hash:
            if mismatch == "raise":
                raise ConfigError(f"{what}: {str(chosen)!r} (from {source}) has {_short(found)}, but "
                                  f"{_short(expected_hash)} were recorded, and only identical weights will do. "
                                  f"Point {source} at the original checkpoint.")
            log.warning("%s: %s has %s, the artifact recorded %s", what, folder, _short(found), _short(expected_hash))
        return folder.resolve()
    candidates = []
    if recorded_path and "://" not in str(recorded_path):
        candidates.append(Path(str(recorded_path)).expanduser())
    candidates += [Path(str(p)) for p in extra if p] + shipped_checkpoints()
    for folder in candidates:
        if not folder.is_dir():
            continue
        if expected_hash is None and folder == candidates[0] and recorded_path:
            return folder.resolve()  # nothing to compare with: the recorded folder is all there is
        if expected_hash and weights_hash(folder) == expected_hash:
            if str(folder) != str(recorded_path):
                log.info("%s: recorded at %s, found by its weights hash at %s", what, recorded_path, folder)
            return folder.resolve()
    if not recorded_path:
        where = "no path recorded"
    elif Path(str(recorded_path)).expanduser().is_dir():
        where = f"recorded at {str(recorded_path)!r}, which holds other weights"
    else:
        where = f"recorded at {str(recorded_path)!r}, which does not exist here"
    raise ConfigError(f"{what} ({_short(expected_hash)}, {where}) was not found: no folder given and no shipped "
                      f"checkpoint has those weights. Pass {flag} FOLDER with that checkpoint.")
