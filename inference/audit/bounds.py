"""Anytime-valid confidence bounds on a Bernoulli rate: the one-sided beta-binomial mixture confidence sequence.

For a candidate rate m, M_t(m) = (mixture over p < m of the likelihood of the first t outcomes under p) divided by
their likelihood under m, with a Beta(a, b) prior truncated to [0, m]. When the true rate is m (or above) it is
a non-negative (super)martingale with mean 1, so by Ville's inequality P(exists t: M_t(true rate) >= 1/delta) <=
delta: the set {m : M_t(m) < 1/delta} holds the true rate at every t at once with probability >= 1 - delta
(Robbins 1970; Howard, Ramdas, McAuliffe, Sekhon, Ann. Statist. 2021, the conjugate beta-binomial mixture). Its
supremum is the upper bound; the lower bound is the same construction on 1 - x. Only (successes, trials) enter, so
a history is two counts; the bound may be checked after every observation (continuous monitoring).
What it leaves out: dependence between observations (it needs i.i.d. outcomes) and any prior knowledge beyond
the Beta(a, b) mixing weights, which move power between small and large rates, never validity.
"""
from __future__ import annotations

import math

import numpy as np

from routedvlm.errors import ConfigError

GRID = np.linspace(0.0, 1.0, 4001)[1:-1]  # candidate rates; a bound is rounded up to the next grid point
STEP = float(GRID[1] - GRID[0])
PRIOR = (1.0, 1.0)  # Beta(a, b) mixing weights, truncated to [0, m] for each candidate m


def check_level(delta) -> float:
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 < delta < 1:
        raise ConfigError(f"The `delta` parameter of the audit bound must be a number in (0, 1). Got {delta!r} instead.")
    return float(delta)


def log_mixture(successes, trials, m=GRID, prior=PRIOR) -> np.ndarray:
    """log M_t(m) (the one-sided test statistic of H0: rate >= m); arguments broadcast like numpy arrays."""
    from scipy.special import betainc, betaln

    a, b = prior
    s = np.asarray(successes, dtype=float)
    f = np.asarray(trials, dtype=float) - s
    m = np.asarray(m, dtype=float)
    with np.errstate(divide="ignore"):
        num = betaln(a + s, b + f) + np.log(betainc(a + s, b + f, m))
        den = betaln(a, b) + np.log(betainc(a, b, m))
        return num - den - s * np.log(m) - f * np.log1p(-m)


def below(successes, trials, alpha: float, delta: float, prior=PRIOR):
    """Whether the rate is shown to be < alpha at level delta (H0: rate >= alpha rejected); broadcasts.
    Valid under continuous monitoring: P(this is ever True while the rate is >= alpha) <= delta."""
    return log_mixture(successes, trials, alpha, prior) >= math.log(1.0 / delta)


def above(successes, trials, alpha: float, delta: float, prior=PRIOR):
    """Whether the rate is shown to be > alpha at level delta (the mirror test on 1 - x); broadcasts."""
    t = np.asarray(trials)
    return below(t - np.asarray(successes), t, 1.0 - alpha, delta, prior[::-1])


def upper_bound(successes: int, trials: int, delta: float, prior=PRIOR) -> float:
    """An upper confidence bound on the rate, valid at every `trials` simultaneously (see the module docstring)."""
    _check_counts(successes, trials)
    if trials == 0:
        return 1.0
    keep = log_mixture(successes, trials, GRID, prior) < math.log(1.0 / check_level(delta))
    if keep.all():
        return 1.0
    last = int(np.flatnonzero(keep)[-1]) if keep.any() else -1
    return min(1.0, float(GRID[last] + STEP) if last >= 0 else STEP)


def lower_bound(successes: int, trials: int, delta: float, prior=PRIOR) -> float:
    """A lower confidence bound on the rate, valid at every `trials` simultaneously."""
    _check_counts(successes, trials)
    return max(0.0, 1.0 - upper_bound(trials - successes, trials, delta, prior[::-1]))


def _check_counts(successes, trials) -> None:
    if not 0 <= successes <= trials:
        raise ConfigError(f"The audit bound needs 0 <= successes <= trials. Got {successes} of {trials}.")
