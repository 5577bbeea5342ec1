"""All strategies' P(correct) for one row through LightGBM's own single-row fast path (C API, through ctypes).

`Booster.predict` on a one-row matrix spends ~50-80 us in Python and ctypes before a tree is walked (LightGBM issue
#6913: the Python package does not expose the fast path). `FastRows` prepares one `FastConfig` per booster once
(`LGBM_BoosterPredictForMatSingleRowFastInit`) and then answers a row with one C call per booster into preallocated
buffers: the same engine and the same trees as `Booster.predict`, so the same numbers, in a few microseconds each.
The library is opened as a `ctypes.PyDLL` (each call holds the GIL) and a lock spans filling the row buffer and the
calls, so threads deciding at once (serve, a decision deadline's worker) never read each other's row.
`fast_rows` returns None where the fast path is unavailable (an older LightGBM, a failed init); callers then use
`Booster.predict`. Only boosters whose trees passed `trees.tree_problem` are handed here (LightGBMRouter checks).
"""
from __future__ import annotations

import ctypes
import logging
import threading
import weakref

log = logging.getLogger(__name__)
C_API_DTYPE_FLOAT64 = 1
C_API_PREDICT_NORMAL = 0
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
    """P(correct) of one row for several boosters; `boosters` is a list of lightgbm.Booster over `n_features`."""

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


def fast_rows(boosters: list, n_features: int) -> FastRows | None:
    """A `FastRows` for `boosters`, or None when LightGBM's fast path is unavailable here."""
    api = _api()
    if api is None:
        return None
    init, predict, free = api
    configs = []
    for b in boosters:
        handle = ctypes.c_void_p()
        num_iteration = b.best_iteration if b.best_iteration > 0 else -1  # what Booster.predict uses
        rc = init(b._handle, C_API_PREDICT_NORMAL, 0, num_iteration, C_API_DTYPE_FLOAT64, n_features,
                  b"num_threads=1", ctypes.byref(handle))
        if rc != 0:
            for c in configs:
                free(c)
            log.info("LightGBM's single-row fast path could not be prepared (rc %s); using Booster.predict", rc)
            return None
        configs.append(handle)
    rows = FastRows(list(boosters), n_features, configs, predict)
    weakref.finalize(rows, _free_all, free, configs, list(boosters))
    return rows


def _free_all(free, configs, boosters) -> None:
    for c in configs:  # boosters are referenced here so they outlive their configs
        free(c)
