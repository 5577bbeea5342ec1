"""Learn-then-Test statistics: worked examples you can check by hand, and a cross-check against MAPIE."""
import math

import numpy as np
import pytest

from routedvlm.errors import ConfigError
from routedvlm.training.calibration import ltt


def test_binomial_p_value_worked_example():
    # H0: risk > 0.1; 0 losses in 10 rows: P(Bin(10, 0.1) <= 0) = 0.9^10
    assert ltt.binomial_p_value(0, 10, 0.1) == pytest.approx(0.9 ** 10)  # 0.3487
    # 1 loss: 0.9^10 + 10 * 0.1 * 0.9^9 = 0.3487 + 0.3874
    assert ltt.binomial_p_value(1, 10, 0.1) == pytest.approx(0.9 ** 10 + 0.9 ** 9)
    # 0 losses in 50 rows at risk 0.05: 0.95^50 = 0.0769 -> rejected at level 0.1, not at 0.05
    assert ltt.binomial_p_value(0, 50, 0.05) == pytest.approx(0.95 ** 50)
    assert ltt.binomial_p_value(np.array([0, 10]), 10, 0.1)[1] == pytest.approx(1.0)


def test_hoeffding_bentkus_worked_example():
    # empirical risk 0 in n rows: Hoeffding exp(-n KL(0 || a)) = (1 - a)^n; Bentkus e * P(Bin <= 0) = e (1 - a)^n
    assert ltt.hoeffding_bentkus_p_value(0.0, 20, 0.1) == pytest.approx(0.9 ** 20)
    # above the limit the p-value is 1 (Hoeffding's exponent is 0)
    assert ltt.hoeffding_bentkus_p_value(0.5, 20, 0.1) == pytest.approx(1.0)
    # for a 0/1 loss the exact tail is never above the Hoeffding bound: binary HB == the binomial p-value
    for k in range(0, 8):
        assert ltt.hoeffding_bentkus_p_value(k / 64, 64, 0.1, binary=True) == pytest.approx(
            ltt.binomial_p_value(k, 64, 0.1))


def test_clopper_pearson_upper_worked_example():
    # 0 events in 10 rows: the upper bound u solves (1 - u)^10 = level -> u = 1 - 0.1^(1/10) = 0.2057
    assert ltt.clopper_pearson_upper(0, 10, 0.1) == pytest.approx(1 - 0.1 ** 0.1)
    # the bound at level l is where the binomial p-value of "risk > u" equals l
    u = ltt.clopper_pearson_upper(3, 40, 0.05)
    assert ltt.binomial_p_value(3, 40, u) == pytest.approx(0.05)


def test_fixed_sequence_stops_at_the_first_non_rejection():
    p = [0.01, 0.05, 0.2, 0.01]  # the last one is never tested
    assert ltt.fixed_sequence(p, 0.1) == [0, 1]
    assert ltt.fixed_sequence(p, 0.04) == [0]
    assert ltt.fixed_sequence(p, 0.005) == []
    assert ltt.fixed_sequence([0.01, float("nan"), 0.01], 0.1) == [0]


def test_rows_needed_worked_example():
    # risk 0 observed, limit 0.05, level 0.025: the smallest n with 0.95^n <= 0.025 is ceil(log 0.025 / log 0.95) = 72
    assert ltt.rows_needed(0.0, 0.05, 0.025) == math.ceil(math.log(0.025) / math.log(0.95)) == 72
    # the shared notes' numbers: limit 0.1, level 0.1, observed 5 % / 7 % / 9 %: about 80 / 190 / 1,560 rows
    assert [ltt.rows_needed(r, 0.1, 0.1) for r in (0.05, 0.07, 0.09)] == [75, 191, 1560]
    assert ltt.rows_needed(0.1, 0.1, 0.1) is None  # at (or above) the limit no number of rows certifies it


def test_invalid_arguments_name_the_parameter():
    with pytest.raises(ConfigError, match=r"^The risk limit `alpha` must be in \(0, 1\)\. Got 0\.0 instead\."):
        ltt.binomial_p_value(0, 10, 0.0)
    with pytest.raises(ConfigError, match=r"^The number of rows `n` must be a positive integer\. Got 0 instead\."):
        ltt.binomial_p_value(0, 0, 0.1)


def test_p_values_and_fixed_sequence_agree_with_mapie():
    from mapie.risk_control import FWERFixedSequenceTesting, control_fwer
    from mapie.risk_control.methods import compute_hoeffding_bentkus_p_value

    n, alpha = 256, 0.05  # k / 256 * 256 is exact in floating point, so MAPIE's ceil(n * r_hat) is k
    k = np.arange(0, 30)
    ours = ltt.binomial_p_value(k, n, alpha)
    theirs = compute_hoeffding_bentkus_p_value(k / n, n, alpha, binary=True)[:, 0]
    np.testing.assert_allclose(ours, theirs, rtol=1e-10)
    np.testing.assert_allclose(ltt.hoeffding_bentkus_p_value(k / n, n, alpha),
                               compute_hoeffding_bentkus_p_value(k / n, n, alpha)[:, 0], rtol=1e-10)
    rng = np.random.default_rng(0)
    for _ in range(50):
        p = np.sort(rng.uniform(0, 0.3, 12)) * rng.choice([1, -1], 12).clip(0, 1) + rng.uniform(0, 0.2, 12)
        assert ltt.fixed_sequence(p, 0.1) == list(control_fwer(p, 0.1, "fixed_sequence"))
    # four chains of six, tested by fixed sequence at 0.1 / 4 each (certify.py's Bonferroni over chains) == MAPIE's
    # multi-start fixed sequence with four starts, as long as no chain is rejected to its end
    chains = [[0.001, 0.01, 0.2, 0.001, 0.001, 0.001], [0.5] * 6, [0.02, 0.03, 0.0, 0.02, 0.02, 0.9],
              [0.0, 0.0, 0.0, 0.0, 0.0, 0.3]]
    ours = sorted(6 * i + j for i, c in enumerate(chains) for j in ltt.fixed_sequence(c, 0.1 / 4))
    theirs = control_fwer(np.concatenate(chains), 0.1, FWERFixedSequenceTesting(n_starts=4))
    assert ours == list(theirs) == [0, 1, 12, 18, 19, 20, 21, 22]


def test_the_difference_p_value_is_the_level_where_the_two_clopper_pearson_bounds_meet_alpha():
    from scipy.stats import beta

    p = float(ltt.difference_p_value(10, 4, 300, 0.05))
    gap = beta.ppf(1 - p / 2, 11, 290) - beta.ppf(p / 2, 4, 297)
    assert gap == pytest.approx(0.05, abs=1e-7)
    # no gain rows: the lower bound is 0, so the p-value is twice the binomial one at alpha (the upper bound at p/2)
    assert float(ltt.difference_p_value(3, 0, 300, 0.05)) == pytest.approx(2 * float(ltt.binomial_p_value(3, 300, 0.05)),
                                                                            rel=1e-6)
    # a difference above alpha is never certified
    assert float(ltt.difference_p_value(40, 10, 300, 0.05)) == 1.0


def test_the_betting_p_value_is_valid_and_rejects_a_clearly_small_mean():
    rng = np.random.default_rng(0)
    alpha, n, draws = 0.05, 300, 2000
    # at the null's edge (mean exactly alpha): P(p <= 0.1) <= 0.1 up to binomial slack
    loss = rng.choice([-1, 0, 1], size=(draws, n), p=[0.05, 0.85, 0.10])  # mean 0.05
    assert float(np.mean(ltt.betting_p_value(loss, alpha, -1.0, 1.0, 0.1) <= 0.1)) <= 0.1 + 3 * np.sqrt(0.09 / draws)
    # a mean well below alpha: rejected
    small = rng.choice([-1, 0, 1], size=(50, n), p=[0.08, 0.88, 0.04])  # mean -0.04
    assert float(np.mean(ltt.betting_p_value(small, alpha, -1.0, 1.0, 0.1) <= 0.1)) >= 0.9
    # the fixed order it reads rows in does not depend on the data
    assert ltt.shuffled(5).tolist() == ltt.shuffled(5).tolist() and sorted(ltt.shuffled(5)) == list(range(5))


def test_rows_needed_for_the_difference_shrinks_with_more_gain_rows():
    a = ltt.rows_needed_difference(0.03, 0.0, 0.05, 0.025)
    b = ltt.rows_needed_difference(0.03, 0.02, 0.05, 0.025)
    assert a is not None and b is not None and b < a
    assert ltt.rows_needed_difference(0.07, 0.01, 0.05, 0.025) is None
