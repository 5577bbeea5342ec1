"""LightGBM text models parsed in a child process before this process reads them (`lightgbm_child`): a damaged file
that would abort LightGBM's C++ parser ends that child, not the caller; the child also checks the trees' structure on
LightGBM's re-serialization of what it parsed (trees.py), so a loop that would hang prediction is refused however the
file spells its integers. The LightGBM router calls it for every file (router.py), whether or not a digest matched
(../integrity.py: a digest proves integrity, not sanity).
"""
from __future__ import annotations

import os
from pathlib import Path

from routedvlm.errors import RouterLoadError

UNHASHED = "its policy.json (format version 1) records no sha256"  # the reasons a check runs, for the message
HASHED = "a matching sha256 proves only that the file is the one policy.json names, not that LightGBM can run it"
CHILD_TIMEOUT_S = 120
# The child loads LightGBM's C library with ctypes only (no numpy, no `import lightgbm`: it starts in ~50 ms), parses
# each file with the same C++ parser the Booster uses, and checks the trees on LightGBM's re-serialization of its parse
# (lightgbm/trees.py: a loop that would hang prediction, however the file spells its integers).
_TREES = str(Path(__file__).with_name("trees.py"))
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
