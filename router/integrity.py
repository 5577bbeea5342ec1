"""Router model files checked before any native parser sees them: paths inside the router folder, sha256 digests.

`policy.json` (format version 2) records the sha256 of every model file it names (`model_sha256`); `verify_files`
refuses a path that leaves the folder, a missing file, a digest that differs, or (in version 2) a missing digest.
LightGBM files (every format: a digest proves integrity, not sanity) are parsed once in a child process first
(`lightgbm_child`), so a damaged file that would abort LightGBM's C++ parser ends that child, not the caller; the child
also checks the trees' structure on LightGBM's re-serialization of what it parsed (`lightgbm/trees.py`), so a loop
that would hang prediction is refused however the file spells its integers.
"""
from __future__ import annotations

import hashlib
import logging
import os
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


# ---- version-1 routers: parse LightGBM files in a child process first ----
CHILD_TIMEOUT_S = 120
# The child loads LightGBM's C library with ctypes only (no numpy, no `import lightgbm`: it starts in ~50 ms), parses
# each file with the same C++ parser the Booster uses, and checks the trees on LightGBM's re-serialization of its parse
# (lightgbm/trees.py: a loop that would hang prediction, however the file spells its integers).
_TREES = str(Path(__file__).with_name("lightgbm") / "trees.py")
_CHILD = """
import ctypes, importlib.util, sys

spec = importlib.util.spec_from_file_location("trees", sys.argv[2])
trees = importlib.util.module_from_spec(spec)
spec.loader.exec_module(trees)
lib = ctypes.CDLL(sys.argv[1])
lib.LGBM_GetLastError.restype = ctypes.c_char_p


def fail(f, why):
    print(f + ": " + why, file=sys.stderr)
    sys.exit(3)


def parsed_text(handle):
    # LightGBM's own re-serialization of what its parser read (canonical integers; no tree walk)
    size = ctypes.c_int64(0)
    buf = ctypes.create_string_buffer(1)
    for _ in range(2):
        if lib.LGBM_BoosterSaveModelToString(handle, 0, -1, 0, ctypes.c_int64(len(buf)), ctypes.byref(size), buf) != 0:
            return None
        if size.value <= len(buf):
            return buf.value.decode("utf-8", "replace")
        buf = ctypes.create_string_buffer(size.value)
    return None


for f in sys.argv[3:]:
    print("checking " + f, file=sys.stderr, flush=True)
    iters, handle = ctypes.c_int(0), ctypes.c_void_p()
    if lib.LGBM_BoosterCreateFromModelfile(f.encode(), ctypes.byref(iters), ctypes.byref(handle)) != 0:
        fail(f, lib.LGBM_GetLastError().decode(errors="replace").splitlines()[0][:300])
    text = parsed_text(handle)
    bad = "LightGBM could not write back the model it read" if text is None else trees.tree_problem(text)
    if bad:
        fail(f, bad)
    lib.LGBM_BoosterFree(handle)
"""


def lightgbm_library() -> str:
    """Path of LightGBM's shared library, found without importing lightgbm."""
    import importlib.util
    import platform

    spec = importlib.util.find_spec("lightgbm")
    if spec is None or not spec.submodule_search_locations:
        raise RouterLoadError("This router needs lightgbm, which is not installed (pip install lightgbm).")
    name = {"Windows": "lib_lightgbm.dll", "Darwin": "lib_lightgbm.dylib"}.get(platform.system(), "lib_lightgbm.so")
    root = Path(next(iter(spec.submodule_search_locations)))
    for candidate in (root / "lib" / name, root / "bin" / name, root.parent / name):
        if candidate.is_file():
            return str(candidate)
    raise RouterLoadError(f"Cannot find LightGBM's library {name} under {str(root)!r}; reinstall lightgbm.")


UNHASHED = "its policy.json (format version 1) records no sha256"
HASHED = "a matching sha256 proves only that the file is the one policy.json names, not that LightGBM can run it"


def lightgbm_child(paths, why: str = UNHASHED) -> None:
    """Parse LightGBM text models in a child process; RouterLoadError when one is unreadable or kills it. `why`: the
    reason the check runs, for the message (UNHASHED: a format-1 router; HASHED: a format 2+ router, digests matched)."""
    import signal
    import subprocess
    import sys

    paths = [str(p) for p in paths]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    try:
        r = subprocess.run([sys.executable, "-I", "-S", "-c", _CHILD, lightgbm_library(), _TREES, *paths], capture_output=True,
                           text=True, errors="replace", timeout=CHILD_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        raise RouterLoadError(f"Parsing the LightGBM model(s) {paths} took more than {CHILD_TIMEOUT_S} s in a "
                              "check process; the files look damaged. Re-export the router with train-router.") from None
    except OSError as exc:
        raise RouterLoadError(f"Cannot start a process to check the LightGBM model(s) {paths} ({exc}).") from None
    if r.returncode == 0:
        return
    lines = r.stderr.strip().splitlines()
    checked = [ln[len("checking "):] for ln in lines if ln.startswith("checking ")]
    culprit = checked[-1] if checked else paths[0]
    if r.returncode < 0:
        try:
            sig = signal.Signals(-r.returncode).name
        except ValueError:
            sig = f"signal {-r.returncode}"
        what = f"crashed LightGBM's parser ({sig})"
    else:
        what = f"is not a readable LightGBM text model ({(lines or ['?'])[-1]})"
    raise RouterLoadError(f"The model file {culprit!r} {what}; it was checked in a child process because {why}. "
                          "Re-export the router with train-router.")
