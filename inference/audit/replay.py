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
    carry = np.zeros(z.shape[0], dtype=np.int8)  # the previous epoch's verdict (unproven before any)
    for k, start in enumerate(range(0, n, size), start=1):
        sl = slice(start, min(start + size, n))
        level = epoch_level(delta, k, window)
        t = np.arange(1, sl.stop - sl.start + 1)
        zs, ys, gs = (np.cumsum(a[:, sl], axis=1) for a in (z, y, gold.astype(int)))
        held = np.maximum.accumulate(below(zs, t, alpha, level), axis=1)  # each finding kept for the epoch
        refuted = np.maximum.accumulate(above(zs, t, alpha, level), axis=1)
        exceeded = np.maximum.accumulate((gs > 0) & above(ys, t, alpha, level), axis=1)
        own = np.where(exceeded, 2, np.where(refuted, 0, np.where(held, 1, -1)))  # -1: undecided
        out[:, sl] = np.where(own == -1, carry[:, None], own)
        carry = np.where(own[:, -1] == -1, 0, own[:, -1]).astype(np.int8)  # undecided: unproven
    return out


def ever(paths: np.ndarray, status: str) -> np.ndarray:
    """Per stream: whether the status was ever `status`."""
    return (paths == CODES.index(status)).any(axis=1)


def first(paths: np.ndarray, status: str) -> np.ndarray:
    """Per stream: the 1-based audit count at which `status` first holds (0: never)."""
    hit = paths == CODES.index(status)
    return np.where(hit.any(axis=1), hit.argmax(axis=1) + 1, 0)
