"""All strategies' P(correct) for one row through LightGBM's own single-row fast path (C API, through ctypes).

`Booster.predict` on a one-row matrix spends ~50-80 us in Python and ctypes before a tree is walked (LightGBM issue
#6913: the Python package does not expose the fast path). `fast_rows` prepares LightGBM's `FastConfig`
(`LGBM_BoosterPredictForMatSingleRowFastInit`) once and then answers a row into preallocated buffers:
- `MergedRows` (binary models, the trainer's kind): the boosters merged into one N-output model (merged.py), so one C
  call walks every strategy's trees, returning raw scores that get LightGBM's own sigmoid here;
- `FastRows` (any other objective): one C call per booster.
Both run LightGBM's engine on LightGBM's trees, so they answer what `Booster.predict` answers; the merged model is
checked against `Booster.predict` on probe rows at load and dropped (with a log line) if it disagrees.
The library is opened as a `ctypes.PyDLL` (each call holds the GIL) and a lock spans filling the row buffer and the
call, so threads deciding at once (serve, a decision deadline's worker) never read each other's row.
`fast_rows` returns None where the fast path is unavailable (an older LightGBM, a failed init); callers then use
`Booster.predict`. Only boosters whose trees passed `trees.tree_problem` are handed here (LightGBMRouter checks), and
the merged model is checked again on LightGBM's parse of it.
"""
from __future__ import annotations

import ctypes
import logging
import math
import struct
import threading
import weakref

from .merged import merged_text
from .trees import tree_problem

log = logging.getLogger(__name__)
C_API_DTYPE_FLOAT64 = 1
C_API_PREDICT_NORMAL = 0
C_API_PREDICT_RAW_SCORE = 1
_API: dict = {}


def _api():
    """(init, predict, free) functions of LightGBM's library opened as PyDLL, or None when it lacks them."""
    if "fns" not in _API:
        _API["fns"] = None
        try:
            from lightgbm.basic import _LIB

            lib = ctypes.PyDLL(_LIB._name)
            init, predict, free = (lib.LGBM_BoosterPredictForMatSingleRowFastInit,
                                   lib.LGBM_BoosterPredictForMatSingleRowFast, lib.LGBM_FastConfigFree)
        except (ImportError, OSError, AttributeError) as exc:
            log.info("LightGBM's single-row fast path is unavailable (%s); using Booster.predict", exc)
            return None
        init.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int32,
                         ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
        predict.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64),
                            ctypes.POINTER(ctypes.c_double)]
        free.argtypes = [ctypes.c_void_p]
        for fn in (init, predict, free):
            fn.restype = ctypes.c_int
        _API["fns"] = (init, predict, free)
    return _API["fns"]


class FastRows:
    """P(correct) of one row for several boosters, one C call each; `boosters` are lightgbm.Booster over `n_features`."""

    def __init__(self, boosters: list, n_features: int, configs: list, predict):
        self.boosters = boosters  # kept alive: each FastConfig points into its booster
        self.row = (ctypes.c_double * n_features)()
        self._lock = threading.Lock()
        self._calls = [(predict, c, ctypes.addressof(self.row), ctypes.byref(ctypes.c_int64()), (ctypes.c_double * 1)())
                       for c in configs]

    def predict(self, values) -> list[float]:
        """P(correct) per booster, in order, for the row `values` (floats, NaN for missing)."""
        with self._lock:
            self.row[:] = values
            out = []
            for predict, config, row, length, result in self._calls:
                if predict(config, row, length, result) != 0:
                    raise RuntimeError("LightGBM's single-row prediction failed")
                out.append(result[0])
        return out


class MergedRows:
    """P(correct) of one row for N binary boosters merged into one N-output `booster`: one C call, then the sigmoid."""

    def __init__(self, booster, n_features: int, config, predict, sigmoids: list[float]):
        self.booster = booster  # kept alive: the FastConfig points into it
        self.row = (ctypes.c_double * n_features)()
        self._raw = (ctypes.c_double * len(sigmoids))()
        self._pack = struct.Struct(f"{n_features}d").pack_into
        self._call = (predict, config, self.row, ctypes.byref(ctypes.c_int64()), self._raw)
        self._negated = [-s for s in sigmoids]  # LightGBM: 1 / (1 + exp(-sigmoid * raw))
        self._lock = threading.Lock()

    def predict(self, values) -> list[float]:
        """P(correct) per booster, in order, for the row `values` (numbers, NaN for missing; TypeError otherwise)."""
        predict, config, row, length, raw = self._call
        with self._lock:
            try:
                self._pack(row, 0, *values)
            except struct.error as exc:
                raise TypeError(str(exc)) from None
            if predict(config, row, length, raw) != 0:
                raise RuntimeError("LightGBM's single-row prediction failed")
            scores = raw[:]
        exp = math.exp
        try:
            return [1.0 / (1.0 + exp(s * x)) for s, x in zip(self._negated, scores)]
        except OverflowError:  # a raw score beyond -709
            return [_sigmoid(s, x) for s, x in zip(self._negated, scores)]


def _sigmoid(negated: float, raw: float) -> float:
    try:
        return 1.0 / (1.0 + math.exp(negated * raw))
    except OverflowError:  # C's exp gives inf there, so LightGBM's probability is 0.0
        return 0.0


def fast_rows(boosters: list, n_features: int) -> MergedRows | FastRows | None:
    """The fastest single-row scorer of `boosters` available here (MergedRows, else FastRows), or None."""
    api = _api()
    if api is None:
        return None
    return _merged_rows(boosters, n_features, api) or _fast_rows(boosters, n_features, api)


def _init(booster, n_features: int, api, predict_type: int):
    init = api[0]
    handle = ctypes.c_void_p()
    num_iteration = booster.best_iteration if booster.best_iteration > 0 else -1  # what Booster.predict uses
    rc = init(booster._handle, predict_type, 0, num_iteration, C_API_DTYPE_FLOAT64, n_features, b"num_threads=1",
              ctypes.byref(handle))
    return handle if rc == 0 else None


def _fast_rows(boosters: list, n_features: int, api) -> FastRows | None:
    configs = []
    for b in boosters:
        handle = _init(b, n_features, api, C_API_PREDICT_NORMAL)
        if handle is None:
            _free_all(api[2], configs, boosters)
            log.info("LightGBM's single-row fast path could not be prepared; using Booster.predict")
            return None
        configs.append(handle)
    rows = FastRows(list(boosters), n_features, configs, api[1])
    weakref.finalize(rows, _free_all, api[2], configs, list(boosters))
    return rows


def _merged_rows(boosters: list, n_features: int, api) -> MergedRows | None:
    import lightgbm
    import numpy as np

    texts = [b.model_to_string(num_iteration=b.best_iteration if b.best_iteration > 0 else -1) for b in boosters]
    merged = merged_text(texts)
    if merged is None:
        return None
    try:
        booster = lightgbm.Booster(model_str=merged[0])
    except lightgbm.basic.LightGBMError as exc:
        log.info("The merged LightGBM model could not be read (%s); one fast call per model instead", exc)
        return None
    if booster.num_model_per_iteration() != len(boosters) or tree_problem(booster.model_to_string()) is not None:
        return None
    handle = _init(booster, n_features, api, C_API_PREDICT_RAW_SCORE)
    if handle is None:
        return None
    rows = MergedRows(booster, n_features, handle, api[1], merged[1])
    weakref.finalize(rows, _free_all, api[2], [handle], [booster])
    probes = np.array([[0.0] * n_features, [math.nan] * n_features, [1.0] * n_features, [-1.0] * n_features])
    want = np.column_stack([b.predict(probes, num_threads=1) for b in boosters])
    if any(abs(g - w) > 1e-12 for row, wants in zip(probes, want) for g, w in zip(rows.predict(list(row)), wants)):
        log.warning("The merged LightGBM model disagrees with Booster.predict; one fast call per model instead")
        return None
    return rows


def _free_all(free, configs, boosters) -> None:
    for c in configs:  # boosters are referenced here so they outlive their configs
        free(c)
