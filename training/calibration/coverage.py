"""Does the certificate hold? Repeat the calibration draw many times against a population whose truth is known.

`population_tables(router, population, train, target)`: every member of the rule family (in certify's chain order)
scored once on every population row: a 0/1 loss matrix and a latency matrix per chain, and each member's
population risk (the truth). `repeat_draws(tables, n_cal, draws, delta, seed)`: `draws` calibration sets of `n_cal`
rows drawn i.i.d. from the population; on each, the same Learn-then-Test as certify.py (exact binomial p-values, or
for the accuracy difference the Clopper-Pearson pair at delta / chains / 2 each; fixed-sequence testing per chain at
delta / chains, `ltt.certified_prefix`) and the same choice (least calibration
latency among the certified). A violation: a certified member whose population risk exceeds alpha (the family-wise
event the guarantee bounds by delta); `chosen_violation`: the chosen member's. The naive control (least latency
among members whose calibration risk is <= alpha, no test) shows the count can fail.
Used by tests/training/test_coverage.py and benchmarks/bench_coverage.py.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import ltt
from .certify import risk_spec
from .rule_family import Scorer


@dataclass
class ChainTable:
    losses: np.ndarray  # bool [members, rows], or int8 in {-1, 0, 1} for the accuracy difference
    latency: np.ndarray  # float [members, rows]
    trivial: np.ndarray  # bool [members]: certified without a test (always the reference under a regret loss)


def population_tables(router, population, train, target: dict, proba=None) -> tuple[dict[str, ChainTable], object]:
    """({chain: ChainTable}, RiskSpec) of every member of `router`'s family on the `population` rows."""
    from .certify import ordered_chains

    spec = risk_spec(target, train, router.policy.strategies)
    chains = ordered_chains(router, train, spec)
    scorer = Scorer(router, population, proba)
    out = {}
    for name, members in chains.items():
        losses, latency = [], []
        for m in members:
            correct, lat, _ = scorer.score(m)
            losses.append(spec.losses(scorer.df, correct))
            latency.append(lat)
        out[name] = ChainTable(np.asarray(losses, dtype=np.int8 if spec.kind == "difference" else bool),
                               np.asarray(latency, dtype=float),
                               np.array([spec.is_trivial(m) for m in members]))
    return out, spec


def repeat_draws(tables: dict[str, ChainTable], alpha: float, n_cal: int, draws: int, delta: float,
                 seed: int = 0, holdout: bool = False, test: str = "clopper-pearson") -> dict:
    """Counts over `draws` i.i.d. calibration draws of `n_cal` population rows (module docstring). `holdout`: draw
    the calibration rows without replacement and judge each statement on the other rows (a random calibration/test
    split of a finite table: the test rows' own noise adds violations, so this overstates the rate). `test`: the
    accuracy difference's p-value, 'clopper-pearson' or 'betting' (certify.RiskSpec.p_values; one draw at a time)."""
    from scipy import sparse

    n_pop = next(iter(tables.values())).losses.shape[1]
    rng = np.random.default_rng(seed)
    if holdout:
        idx = np.argsort(rng.random((draws, n_pop)), axis=1)[:, :n_cal]
    else:
        idx = rng.integers(0, n_pop, size=(draws, n_cal))
    pick = sparse.csr_matrix((np.ones(idx.size), (np.repeat(np.arange(draws), n_cal), idx.ravel())),
                             shape=(draws, n_pop))
    level = delta / len(tables)
    violation = np.zeros(draws, dtype=bool)
    best = np.full(draws, np.inf)
    best_risk = np.zeros(draws)
    naive = np.full(draws, np.inf)
    naive_risk = np.zeros(draws)
    feasible = np.zeros(draws, dtype=bool)
    signed = any(t.losses.dtype == np.int8 for t in tables.values())
    if signed:  # the Clopper-Pearson pair at level / 2 each, once per count: rejected iff upper - lower <= alpha
        counts = np.arange(n_cal + 1)
        upper = ltt.cp_upper(counts, n_cal, level / 2)
        lower = ltt.clopper_pearson_lower(counts, n_cal, level / 2)
    for t in tables.values():
        k = np.rint(pick @ t.losses.T.astype(float)).astype(int)  # [draws, members] summed loss on each draw
        if holdout:  # [draws, members]: the risk on the rows each draw left out
            risk = (t.losses.sum(axis=1)[None, :] - k) / (n_pop - n_cal)
        else:
            risk = np.broadcast_to(t.losses.mean(axis=1)[None, :], k.shape)
        lat = (pick @ t.latency.T) / n_cal
        if signed and test == "betting":
            order = ltt.shuffled(n_cal)
            p = np.stack([ltt.betting_p_value(t.losses[:, idx[d][order]], alpha, -1.0, 1.0, level)
                          for d in range(draws)])
            p = np.where(t.trivial[None, :], 0.0, p)
        elif signed:
            k_loss = np.rint(pick @ (t.losses > 0).T.astype(float)).astype(int)
            ok = upper[k_loss] - lower[k_loss - k] <= alpha  # k_loss - k: the gain rows
            p = np.where(t.trivial[None, :] | ok, 0.0, 1.0)
        else:
            p = np.where(t.trivial[None, :], 0.0, ltt.binomial_p_value(k, n_cal, alpha))
        cert = ltt.certified_prefix(p, level)
        violation |= (cert & (risk > alpha)).any(axis=1)
        real = cert & ~t.trivial[None, :]
        feasible |= real.any(axis=1)
        masked = np.where(real, lat, np.inf)
        j = masked.argmin(axis=1)
        better = masked[np.arange(draws), j] < best
        best = np.where(better, masked[np.arange(draws), j], best)
        rows = np.arange(draws)
        best_risk = np.where(better, risk[rows, j], best_risk)
        ok = np.where((k / n_cal <= alpha) & ~t.trivial[None, :], lat, np.inf)
        jn = ok.argmin(axis=1)
        nb = ok[np.arange(draws), jn] < naive
        naive = np.where(nb, ok[np.arange(draws), jn], naive)
        naive_risk = np.where(nb, risk[rows, jn], naive_risk)
    chosen_violation = feasible & (best_risk > alpha)
    return {"draws": draws, "n_cal": n_cal, "delta": delta, "alpha": alpha,
            "violation_rate": float(violation.mean()), "chosen_violation_rate": float(chosen_violation.mean()),
            "feasible_rate": float(feasible.mean()), "naive_violation_rate": float((np.isfinite(naive)
                                                                                    & (naive_risk > alpha)).mean()),
            "chosen_mean_latency_ms": float(np.mean(best[feasible])) if feasible.any() else float("nan")}


def binomial_slack(rate: float, draws: int, z: float = 3.0) -> float:
    """z standard errors of a rate estimated from `draws` independent draws."""
    return z * float(np.sqrt(rate * (1 - rate) / draws))
