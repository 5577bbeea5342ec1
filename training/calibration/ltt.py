"""Learn-then-Test (Angelopoulos, Bates, Candes, Jordan, Lei 2021): p-values for "risk > alpha" and
fixed-sequence testing, the statistics behind a certified operating point (training/calibration/certify.py).

- `binomial_p_value(k, n, alpha)`: for a 0/1 loss with k losses on n i.i.d. rows, P(Binomial(n, alpha) <= k),
  the exact one-sided binomial (Clopper-Pearson) test of H0: risk > alpha. It equals MAPIE's
  Hoeffding-Bentkus p-value with `binary=True` (the exact tail is never above the Hoeffding/KL bound).
- `hoeffding_bentkus_p_value(mean, n, alpha)`: for a loss bounded in [0, 1] (LTT eq. 11-12).
- `fixed_sequence(p_values, level)`: hypotheses in a fixed order (conservative first); reject while
  p <= level, stop at the first p > level. Controls the family-wise error at `level` with no multiplicity cost.
- `rows_needed(rate, alpha, level)`: about how many rows would certify a loss rate `rate` observed at that rate.
- `difference_p_value(k_loss, k_gain, n, alpha)`: for a loss in {-1, 0, 1} (the accuracy difference against a
  reference: +1 reference right and chosen wrong, -1 the other way round), the smallest level e at which the
  one-sided Clopper-Pearson upper bound on P(+1) minus the lower bound on P(-1), each at e / 2, is <= alpha. Valid:
  under H0 "P(+1) - P(-1) > alpha" the bounds both hold with probability >= 1 - e, and then the difference is > alpha.
- `betting_p_value(losses, alpha, lo, hi)`: the Waudby-Smith-Ramdas betting (hedged capital) p-value of
  H0 "mean > alpha" for a loss bounded in [lo, hi], rows in their given order: 1 / the largest capital reached.
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


def clopper_pearson_lower(k, n: int, level):
    """The one-sided (1 - level) Clopper-Pearson lower confidence bound of a rate with k events in n rows."""
    from scipy.stats import beta

    k = np.asarray(k, dtype=float)
    with np.errstate(invalid="ignore"):
        out = beta.ppf(level, np.maximum(k, 1e-300), n - k + 1)
    return np.where(k <= 0, 0.0, out)


def cp_upper(k, n: int, level):
    from scipy.stats import beta

    k = np.asarray(k, dtype=float)
    with np.errstate(invalid="ignore"):
        out = beta.ppf(1 - level, k + 1, np.maximum(n - k, 1e-300))
    return np.where(k >= n, 1.0, out)


def difference_p_value(k_loss, k_gain, n: int, alpha: float, iters: int = 60):
    """The p-value of H0 "P(loss row) - P(gain row) > alpha" after `k_loss` rows with loss +1 and `k_gain` with -1
    among `n` (module docstring): the least e with CP_upper(k_loss, e/2) - CP_lower(k_gain, e/2) <= alpha, found by
    bisection on log(e) (the left side falls as e grows). 1 when even e = 1 does not reach alpha."""
    _check(n, alpha)
    k_loss = np.asarray(k_loss, dtype=float)
    k_gain = np.broadcast_to(np.asarray(k_gain, dtype=float), k_loss.shape)
    ok = lambda e: cp_upper(k_loss, n, e / 2) - clopper_pearson_lower(k_gain, n, e / 2) <= alpha  # noqa: E731
    lo, hi = np.full(k_loss.shape, -40.0), np.zeros(k_loss.shape)  # log10(e): e in [1e-40, 1]
    reach = ok(np.ones(k_loss.shape))
    for _ in range(iters):
        mid = (lo + hi) / 2
        good = ok(10.0 ** mid)
        hi, lo = np.where(good, mid, hi), np.where(good, lo, mid)
    return np.where(reach, 10.0 ** hi, 1.0)


def betting_p_value(losses, alpha: float, lo: float = 0.0, hi: float = 1.0, level: float = 0.1):
    """Waudby-Smith-Ramdas betting p-value of H0 "mean loss > alpha" for losses in [lo, hi] (last axis: rows, in
    their order; leading axes: members): rescaled to x in [0, 1], m = (alpha - lo) / (hi - lo), capital
    K_t = prod (1 + lambda_i (m - x_i)), a nonnegative supermartingale under H0; lambda_i the predictable plug-in
    min(sqrt(2 log(1 / level) / (n var_{i-1})), 0.75 / (1 - m)) (the predictable plug-in of Waudby-Smith & Ramdas; the cap keeps every factor > 0) and p = min(1, 1 / max_t K_t)
    (Ville's inequality). `level` only tunes the bets (it is the level the test will be read at)."""
    x = (np.asarray(losses, dtype=float) - lo) / (hi - lo)
    m = (alpha - lo) / (hi - lo)
    if not 0.0 < m < 1.0:
        raise ConfigError(f"The risk limit `alpha` must lie inside the loss range ({lo}, {hi}). Got {alpha!r}.")
    n = x.shape[-1]
    t = np.arange(1, n + 1)
    mu = (0.5 + np.cumsum(x, axis=-1)) / (t + 1)
    var = (0.25 + np.cumsum((x - mu) ** 2, axis=-1)) / (t + 1)
    var_prev = np.concatenate([np.full(x.shape[:-1] + (1,), 0.25), var[..., :-1]], axis=-1)
    lam = np.minimum(np.sqrt(2 * np.log(1 / level) / (n * var_prev)), 0.75 / (1 - m))
    log_k = np.cumsum(np.log1p(lam * (m - x)), axis=-1)
    return np.minimum(1.0, np.exp(-np.max(log_k, axis=-1)))


def shuffled(n: int) -> np.ndarray:
    """The order the betting test reads n calibration rows in: a fixed permutation (seed 0), independent of the
    data, so a table sorted by anything (difficulty, length, time) is read as an exchangeable sequence."""
    return np.random.default_rng(0).permutation(n)


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
    return _least_n(ok, max_rows)


def rows_needed_difference(rate_loss: float, rate_gain: float, alpha: float, level: float,
                           max_rows: int = 10_000_000) -> int | None:
    """`rows_needed` for the accuracy difference: the least n at which `difference_p_value` of the counts
    rate_loss * n and rate_gain * n (real-valued) is <= level. None when rate_loss - rate_gain >= alpha."""
    if not rate_loss - rate_gain < alpha:
        return None
    ok = lambda n: float(difference_p_value(rate_loss * n, rate_gain * n, n, alpha, iters=40)) <= level  # noqa: E731
    return _least_n(ok, max_rows)


def _least_n(ok, max_rows: int) -> int | None:
    """The least n >= 1 with ok(n), for ok monotone in n (doubling, then bisection); None past max_rows."""
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
