"""Router model files checked before any native parser sees them: paths inside the router folder, sha256 digests.

`policy.json` (format version 2) records the sha256 of every model file it names (`model_sha256`); `verify_files`
refuses a path that leaves the folder, a missing file, a digest that differs, or (in version 2) a missing digest.
A digest proves integrity, not sanity: a type whose parser must not see a damaged file checks it further in its own
unit (`_check_unverified`; LightGBM's child-process parse is lightgbm/child_check.py).
"""
from __future__ import annotations

import hashlib
import logging
from pathlib import Path, PurePosixPath

from routedvlm.errors import RouterLoadError

log = logging.getLogger(__name__)
HASHED_SINCE = 2  # the policy.json format version from which every named model file needs a digest
from .provenance import CHUNK, sha256_file  # noqa: F401 - kept importable from here


def inside(directory: Path, rel) -> tuple[Path | None, str | None]:
    """(resolved path, None) when `rel` is a relative path that stays inside `directory` after following
    symlinks, else (None, why)."""
    if not isinstance(rel, str) or not rel or "\x00" in rel:
        return None, f"{rel!r} is not a file name"
    parts = PurePosixPath(rel.replace("\\", "/"))
    if parts.is_absolute() or Path(rel).is_absolute() or (len(rel) > 1 and rel[1] == ":"):
        return None, f"{rel!r} is an absolute path"
    if ".." in parts.parts:
        return None, f"{rel!r} climbs out of the folder with '..'"
    root = directory.resolve()
    target = (root / rel).resolve()
    if target != root and root not in target.parents:
        return None, f"{rel!r} leads outside the folder (to {str(target)!r}, through a symlink)"
    return target, None


def digests(directory, files) -> dict[str, str]:
    """{relative path: sha256} of `files` inside `directory` (what `Router.save` records)."""
    directory = Path(directory)
    return {rel: sha256_file(directory / rel) for rel in files}


def verify_files(policy, directory, files) -> list[str]:
    """Check every model file `files` names before it is parsed; returns the files with no recorded digest
    (allowed only below format version 2). RouterLoadError lists every problem at once."""
    directory = Path(directory)
    recorded = policy.model_sha256
    problems, absent, unhashed = [], [], []
    for rel in files:
        path, why = inside(directory, rel)
        if why:
            problems.append(f"model file {why}; model files must lie inside the router folder")
        elif not path.is_file():
            absent.append(rel)
        elif rel not in recorded:
            if policy.format_version >= HASHED_SINCE:
                problems.append(f"model file {rel!r} has no sha256 in `model_sha256` (required since format "
                                f"version {HASHED_SINCE})")
            else:
                unhashed.append(rel)
        elif (got := sha256_file(path)) != recorded[rel]:
            problems.append(f"model file {rel!r} has sha256 {got[:16]}..., but policy.json records "
                            f"{recorded[rel][:16]}... (the file is damaged or was changed after it was written)")
    for rel in sorted(set(recorded) - set(files)):
        if inside(directory, rel)[1]:
            problems.append(f"`model_sha256` names {inside(directory, rel)[1]}")
    if absent:
        problems.insert(0, f"lacks model file(s) {sorted(absent)} named in policy.json")
    if problems:
        head = f"The router folder {str(directory)!r} "
        if len(problems) == 1 and absent:
            raise RouterLoadError(head + problems[0] + ". Copy the whole folder, or re-export it with train-router.")
        raise RouterLoadError(head + "fails its integrity check; nothing was parsed:\n  - " + "\n  - ".join(problems)
                              + "\nCopy the whole folder again, or re-export the router with train-router.")
    return unhashed


def read_verified(policy, directory, rel: str) -> bytes:
    """The bytes of model file `rel`, checked again against its recorded digest (so the bytes a parser gets are
    the bytes that were verified), or unchecked when none is recorded (format version 1)."""
    path, why = inside(Path(directory), rel)
    if why:
        raise RouterLoadError(f"model file {why}; model files must lie inside the router folder.")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RouterLoadError(f"Cannot read model file {str(path)!r} ({exc}).") from None
    want = policy.model_sha256.get(rel)
    if want is not None and hashlib.sha256(data).hexdigest() != want:
        raise RouterLoadError(f"Model file {str(path)!r} changed while the router was loading (sha256 differs from "
                              "policy.json). Load it again once nothing writes to the folder.")
    return data
