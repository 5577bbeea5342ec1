"""Learn-then-Test (Angelopoulos, Bates, Candes, Jordan, Lei 2021): p-values for "risk > alpha" and
fixed-sequence testing, the statistics behind a certified operating point (training/calibration/certify.py).

- `binomial_p_value(k, n, alpha)`: for a 0/1 loss with k losses on n i.i.d. rows, P(Binomial(n, alpha) <= k),
  the exact one-sided binomial (Clopper-Pearson) test of H0: risk > alpha. It equals MAPIE's
  Hoeffding-Bentkus p-value with `binary=True` (the exact tail is never above the Hoeffding/KL bound).
- `hoeffding_bentkus_p_value(mean, n, alpha)`: for a loss bounded in [0, 1] (LTT eq. 11-12).
- `fixed_sequence(p_values, level)`: hypotheses in a fixed order (conservative first); reject while
  p <= level, stop at the first p > level. Controls the family-wise error at `level` with no multiplicity cost.
- `rows_needed(rate, alpha, level)`: about how many rows would certify a loss rate `rate` observed at that rate.
Nothing here looks at data beyond counts; everything is hand-checkable (tests/training/test_ltt.py).
"""
from __future__ import annotations

import math

import numpy as np

from routedvlm.errors import ConfigError


def binomial_p_value(k, n: int, alpha: float):
    """P(Binomial(n, alpha) <= k): the p-value of H0 "risk > alpha" after k losses in n rows (0/1 loss)."""
    from scipy.stats import binom

    _check(n, alpha)
    return binom.cdf(np.floor(np.asarray(k, dtype=float) + 1e-9), n, alpha)


def _kl(a, b):
    """Bernoulli KL divergence KL(a || b) (LTT's h1), with 0 log 0 = 0."""
    a = np.clip(np.asarray(a, dtype=float), 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        t1 = np.where(a > 0, a * np.log(a / b), 0.0)
        t2 = np.where(a < 1, (1 - a) * np.log((1 - a) / (1 - b)), 0.0)
    return t1 + t2


def hoeffding_bentkus_p_value(mean, n: int, alpha: float, binary: bool = False):
    """min(exp(-n KL(min(mean, alpha) || alpha)), c * P(Binomial(n, alpha) <= ceil(n * mean))), c = e for a
    loss bounded in [0, 1], 1 for a 0/1 loss: the p-value of H0 "risk > alpha" at an empirical risk `mean`."""
    from scipy.stats import binom

    _check(n, alpha)
    mean = np.asarray(mean, dtype=float)
    hoeffding = np.exp(-n * _kl(np.minimum(mean, alpha), alpha))
    bentkus = (1.0 if binary else math.e) * binom.cdf(np.ceil(n * mean - 1e-9), n, alpha)
    return np.minimum(hoeffding, bentkus)


def clopper_pearson_upper(k: int, n: int, level: float) -> float:
    """The one-sided (1 - level) Clopper-Pearson upper confidence bound of a rate with k events in n rows."""
    from scipy.stats import beta

    if n <= 0:
        return 1.0
    return 1.0 if k >= n else float(beta.ppf(1 - level, k + 1, n - k))


def fixed_sequence(p_values, level: float) -> list[int]:
    """Indices rejected by fixed-sequence testing at `level`: the longest prefix with every p <= level."""
    out = []
    for i, p in enumerate(np.asarray(p_values, dtype=float)):
        if not p <= level:  # NaN never rejects
            break
        out.append(i)
    return out


def certified_prefix(p_values, level: float) -> np.ndarray:
    """Vectorised `fixed_sequence` over the last axis: True for the members rejected (certified) at `level`."""
    ok = np.asarray(p_values, dtype=float) <= level  # NaN never rejects
    return np.cumprod(ok, axis=-1).astype(bool)


def rows_needed(rate: float, alpha: float, level: float, max_rows: int = 10_000_000) -> int | None:
    """About how many rows certify "risk <= alpha" at `level` when the loss rate stays `rate`: the smallest n with
    I_{1-alpha}(n - rate*n, rate*n + 1) <= level, the binomial tail at k = rate*n extended to real k (so the
    answer is monotone in `rate`, without the steps of floor(rate*n)). None when rate >= alpha."""
    from scipy.special import betainc

    if not rate < alpha:
        return None
    ok = lambda n: float(betainc(n - rate * n, rate * n + 1, 1 - alpha)) <= level  # noqa: E731
    hi = 1
    while not ok(hi):
        hi *= 2
        if hi > max_rows:
            return None
    lo = hi // 2
    while lo + 1 < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def _check(n: int, alpha: float) -> None:
    if not (isinstance(n, (int, np.integer)) and n >= 1):
        raise ConfigError(f"The number of rows `n` must be a positive integer. Got {n!r} instead.")
    if not 0.0 < float(alpha) < 1.0:
        raise ConfigError(f"The risk limit `alpha` must be in (0, 1). Got {alpha!r} instead.")
