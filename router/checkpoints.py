"""Checkpoint identity: a content hash of a model folder's weight files (the labels' `revision` format)."""
from __future__ import annotations

import hashlib
from pathlib import Path

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
