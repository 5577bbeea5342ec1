"""The live audit's statistics: the beta-mixture confidence sequence, by hand and by simulation of >= 1000 streams
under continuous monitoring (status checked after every audit)."""
import math

import numpy as np
import pytest

from routedvlm.inference.audit.bounds import below, log_mixture, lower_bound, upper_bound
from routedvlm.inference.audit.monitor import HOLDING, UNPROVEN, VIOLATED, AuditMonitor
from routedvlm.inference.audit.replay import ever, first, status_paths

STREAMS, DELTA, ALPHA = 1000, 0.05, 0.10
SLACK = 3 * math.sqrt(DELTA * (1 - DELTA) / STREAMS)  # binomial slack of an estimated rate near delta


def test_worked_example_no_successes():
    # S = 0, uniform prior on [0, m]: M_t(m) = (1 - (1 - m)^(t+1)) / ((t + 1) m (1 - m)^t), by hand
    t, m = 30, 0.2
    by_hand = (1 - (1 - m) ** (t + 1)) / ((t + 1) * m * (1 - m) ** t)
    assert math.exp(float(log_mixture(0, t, m))) == pytest.approx(by_hand, rel=1e-9)


def test_bounds_bracket_the_estimate_and_tighten():
    assert upper_bound(0, 0, DELTA) == 1.0 and lower_bound(0, 0, DELTA) == 0.0
    for s, n in [(3, 100), (30, 1000), (300, 10000)]:
        assert lower_bound(s, n, DELTA) < s / n < upper_bound(s, n, DELTA)
    widths = [upper_bound(n // 20, n, DELTA) - lower_bound(n // 20, n, DELTA) for n in (100, 1000, 10000)]
    assert widths[0] > widths[1] > widths[2]
    assert all(upper_bound(s, 200, DELTA) <= upper_bound(s + 1, 200, DELTA) for s in range(0, 60))


def test_the_status_test_agrees_with_the_displayed_bound():
    for s, n in [(2, 150), (5, 150), (9, 300), (30, 300)]:
        ub = upper_bound(s, n, DELTA)
        assert bool(below(s, n, ALPHA, DELTA)) == (ub <= ALPHA + 1e-3) or abs(ub - ALPHA) < 2e-3


def _bernoulli(rate, n, seed):
    return (np.random.default_rng(seed).random((STREAMS, n)) < rate).astype(int)


@pytest.mark.slow
@pytest.mark.parametrize("window", [0, 200])
def test_false_holding_rate_stays_below_delta(window):
    d = _bernoulli(ALPHA, 2000, 1)  # the disagreement rate is at the limit: "holding" would be false
    paths = status_paths(d, np.zeros_like(d), np.zeros(d.shape, bool), ALPHA, DELTA, window)
    assert ever(paths, HOLDING).mean() <= DELTA + SLACK
    assert not ever(paths, VIOLATED).any()  # without gold, never violated


@pytest.mark.slow
@pytest.mark.parametrize("window", [0, 200])
def test_false_violated_rate_stays_below_delta(window):
    r = _bernoulli(ALPHA, 2000, 2)  # gold on every audit, regret exactly at the limit: "violated" would be false
    paths = status_paths(r, r, np.ones(r.shape, bool), ALPHA, DELTA, window)
    assert ever(paths, VIOLATED).mean() <= DELTA + SLACK


def test_a_fixed_n_interval_rechecked_after_every_audit_is_not_valid():
    """Why an anytime-valid bound: the one-sided 95 % Clopper-Pearson bound, re-read after every audit, says
    'holding' falsely on far more than 5 % of the streams."""
    from scipy.stats import beta

    d = _bernoulli(ALPHA, 2000, 1)
    s, t = np.cumsum(d, axis=1), np.arange(1, 2001)
    cp = beta.ppf(1 - DELTA, s + 1, t - s)
    assert (cp <= ALPHA).any(axis=1).mean() > 2 * DELTA


def test_power_holding_and_violated_are_reached():
    d = _bernoulli(0.03, 600, 3)  # well under the limit
    at = first(status_paths(d, np.zeros_like(d), np.zeros(d.shape, bool), ALPHA, DELTA), HOLDING)
    assert ((at > 0) & (at <= 400)).mean() >= 0.9
    r = _bernoulli(0.25, 600, 4)  # far over the limit, with gold
    at = first(status_paths(r, r, np.ones(r.shape, bool), ALPHA, DELTA), VIOLATED)
    assert ((at > 0) & (at <= 200)).mean() >= 0.9


def test_monitor_follows_the_replayed_path():
    rng = np.random.default_rng(5)
    d = (rng.random(1000) < 0.02).astype(int)
    d[600:] = (rng.random(400) < 0.4).astype(int)  # a shift after 600 audits
    mon = AuditMonitor(alpha=ALPHA, reference="large_reason", window=300)
    seen = [mon.record(str(i), agree=not x) for i, x in enumerate(d)]
    codes = status_paths(d, np.zeros_like(d), np.zeros(d.shape, bool), ALPHA, DELTA, 300)[0]
    assert seen == [(UNPROVEN, HOLDING, VIOLATED)[c] for c in codes]
    assert seen[599] == HOLDING and seen[-1] == UNPROVEN  # held, then left holding within 2 epochs of the shift


def test_gold_feedback_turns_disagreements_into_regret(caplog):
    mon = AuditMonitor(alpha=ALPHA, reference="large_reason", router="models:/r@champion")
    for i in range(60):
        mon.record(f"r{i}", agree=i % 4 != 0)  # 25 % disagreement: not holding on disagreement alone
    assert mon.status == UNPROVEN
    for i in range(0, 60, 4):
        mon.feedback(f"r{i}", regret=False)  # every disagreement was harmless (both right or both wrong)
    for i in range(60, 120):
        mon.record(f"r{i}", agree=True)
    assert mon.status == HOLDING and mon.snapshot()["bound_on"] == "regret"
    assert "audit status of router models:/r@champion: unproven -> holding" in caplog.text  # one log line per change
    assert caplog.text.count("unproven -> holding") == 1
    with pytest.raises(KeyError, match=r"^No audit is remembered for request id 'nope'"):
        mon.feedback("nope", regret=True)
    with pytest.raises(KeyError, match=r"^Request 'r0' already has gold feedback"):
        mon.feedback("r0", regret=True)
