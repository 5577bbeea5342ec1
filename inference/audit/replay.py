"""The status path of whole audit streams at once (vectorised): simulation checks and `audit report` use it.

`status_paths(z, y, gold, alpha, delta, window)` gives, for each stream (row) and each audit (column), the status
the `AuditMonitor` reports after that audit when gold arrives with the audit: z = the upper sequence's outcome
(regret where gold is known, else disagreement), y = the lower one's (regret where known, else 0). Codes:
0 unproven, 1 holding, 2 violated (see `CODES`).
"""
from __future__ import annotations

import math

import numpy as np

from .bounds import above, below
from .monitor import HOLDING, UNPROVEN, VIOLATED

CODES = (UNPROVEN, HOLDING, VIOLATED)


def epoch_level(delta: float, k: int, window: int) -> float:
    """The level of epoch k (1-based): delta itself without epochs, else delta * 6 / (pi^2 k^2)."""
    return delta * 6 / (math.pi**2 * k**2) if window else delta


def status_paths(z, y, gold, alpha: float, delta: float, window: int = 0) -> np.ndarray:
    """Status codes (streams x audits); `gold` (same shape, bool) marks audits with gold feedback."""
    z, y, gold = (np.atleast_2d(np.asarray(a)) for a in (z, y, gold))
    n = z.shape[1]
    size = window or n
    out = np.zeros(z.shape, dtype=np.int8)
    carry = None
    for k, start in enumerate(range(0, n, size), start=1):
        sl = slice(start, min(start + size, n))
        level = epoch_level(delta, k, window)
        t = np.arange(1, sl.stop - sl.start + 1)
        zs, ys, gs = (np.cumsum(a[:, sl], axis=1) for a in (z, y, gold.astype(int)))
        held = np.maximum.accumulate(below(zs, t, alpha, level), axis=1)  # once reached, kept for the epoch
        exceeded = np.maximum.accumulate((gs > 0) & above(ys, t, alpha, level), axis=1)
        code = np.where(exceeded, 2, np.where(held, 1, 0))
        out[:, sl] = code if carry is None else np.where(code == 0, carry[:, None], code)
        carry = code[:, -1]  # the epoch's own final verdict, which the next epoch shows while it is unproven
    return out


def ever(paths: np.ndarray, status: str) -> np.ndarray:
    """Per stream: whether the status was ever `status`."""
    return (paths == CODES.index(status)).any(axis=1)


def first(paths: np.ndarray, status: str) -> np.ndarray:
    """Per stream: the 1-based audit count at which `status` first holds (0: never)."""
    hit = paths == CODES.index(status)
    return np.where(hit.any(axis=1), hit.argmax(axis=1) + 1, 0)
