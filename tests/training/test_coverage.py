"""The certificate holds: over >= 1000 calibration draws from a population whose truth is known, a certified member
with population risk above alpha appears in at most delta of the draws (within binomial slack); a good router
certifies; the fast repeated path is the certify() code; a procedure without the test violates far more often (so
the count can fail); the same on RouteLLM's published GSM8K outcomes (tests/data/routellm_gsm8k/)."""
from pathlib import Path

import numpy as np
import pytest

from routedvlm.training.calibration import coverage
from routedvlm.training.calibration.certify import certify

DRAWS, N_CAL, DELTA = 1000, 300, 0.1
GSM8K = Path(__file__).resolve().parents[1] / "data" / "routellm_gsm8k" / "gsm8k_slice.csv"


ACCURACY, MIN_ACCURACY = {"kind": "accuracy", "value": 0.95}, {"kind": "min_accuracy", "value": 0.85}
REGRET = {"kind": "accuracy", "value": 0.95, "loss": "regret"}  # the accuracy target certified on the regret proxy
DIFF_CP = {"kind": "accuracy", "value": 0.95, "test": "clopper-pearson"}  # the difference, Clopper-Pearson pair
# ACCURACY: the difference with the default betting p-value (one draw at a time: fewer draws)


@pytest.fixture(scope="module")
def world():
    """A small LightGBM router fitted on 1500 synthetic rows; an 8000-row population of the same process (the
    calibration rows are drawn from it with replacement, so its risks are the exact truth)."""
    from routedvlm.training.config import TrainConfig
    from routedvlm.training.lightgbm.trainer import fit_router
    from routedvlm.training.split import Split
    from routedvlm.training.synthetic import make_synthetic_labels

    train = make_synthetic_labels(1500, seed=11)
    population = make_synthetic_labels(8000, seed=12)
    cfg = TrainConfig(no_mlflow=True, num_boost_round=60, mode="one-shot", cv_folds=0)
    features = [c for c in train.columns if c.startswith("feat__prompt__")]
    candidates = ["large_direct", "small_reason", "transfer_16", "transfer_64", "large_reason"]
    router = fit_router(cfg, Split(train, train.head(20), train.head(20)), candidates, features, [], "synthetic")
    return router, train, population, {}


def _tables(world, target):
    router, train, population, cache = world
    key = (target["kind"], target.get("loss"), target.get("test"))
    if key not in cache:
        cache[key] = coverage.population_tables(router, population, train, target)
    return cache[key]


@pytest.mark.parametrize("target", [ACCURACY, DIFF_CP, REGRET, MIN_ACCURACY],
                         ids=["difference-betting", "difference-clopper-pearson", "regret", "min_accuracy"])
def test_certified_statements_are_false_in_at_most_delta_of_the_draws_and_a_good_router_certifies(world, target):
    population = world[2]
    tables, spec = _tables(world, target)
    draws = 300 if spec.test == "betting" and spec.kind == "difference" else DRAWS
    out = coverage.repeat_draws(tables, spec.alpha, N_CAL, draws, DELTA, seed=1, test=spec.test)
    assert out["violation_rate"] <= DELTA + coverage.binomial_slack(DELTA, draws), out
    assert out["chosen_violation_rate"] <= out["violation_rate"]
    assert out["feasible_rate"] >= 0.9, out  # power: a good router certifies in nearly every draw
    reference_ms = float(population[f"latency_ms__{spec.reference}"].mean())
    assert out["chosen_mean_latency_ms"] < 0.8 * reference_ms, out  # ... and what it certifies saves latency


def test_without_the_test_the_same_count_finds_violations(world):
    tables, spec = _tables(world, ACCURACY)
    out = coverage.repeat_draws(tables, spec.alpha, N_CAL, DRAWS, DELTA, seed=2)
    assert out["naive_violation_rate"] > 2 * DELTA > out["violation_rate"], out


@pytest.mark.parametrize("target", [ACCURACY, DIFF_CP, REGRET], ids=["betting", "clopper-pearson", "regret"])
def test_the_repeated_draws_certify_what_certify_certifies(world, target):
    router, train, population, _ = world
    tables, spec = _tables(world, target)
    rows = np.random.default_rng(3).integers(0, len(population), N_CAL)
    calib = population.iloc[rows].reset_index(drop=True).assign(sample_id=[f"c{i:04d}" for i in range(N_CAL)])
    cal = certify(router, calib, train, target, DELTA)
    for chain, table in tables.items():
        if spec.kind == "difference" and spec.test == "betting":  # rows in the fixed order the test reads them
            p = coverage.ltt.betting_p_value(table.losses[:, rows][:, coverage.ltt.shuffled(N_CAL)], spec.alpha, -1.0,
                                             1.0, DELTA / len(tables))
        elif spec.kind == "difference":
            k_loss, k_gain = (table.losses[:, rows] > 0).sum(axis=1), (table.losses[:, rows] < 0).sum(axis=1)
            p = coverage.ltt.difference_p_value(k_loss, k_gain, N_CAL, spec.alpha)
        else:
            p = coverage.ltt.binomial_p_value(table.losses[:, rows].sum(axis=1), N_CAL, spec.alpha)
        p = np.where(table.trivial, 0.0, p)
        assert coverage.ltt.certified_prefix(p, DELTA / len(tables)).tolist() == [s.certified for s in cal.chains[chain]]
    assert cal.feasible  # a draw that certifies something: the comparison is not vacuous


@pytest.mark.parametrize("loss, test", [("difference", "betting"), ("difference", "clopper-pearson"), ("regret", None)])
def test_on_routellm_gsm8k_outcomes_the_certificate_holds_over_random_splits(loss, test):
    import pandas as pd

    from routedvlm.data.labels.outcomes import import_outcomes
    from routedvlm.training.config import TrainConfig
    from routedvlm.training.lightgbm.trainer import fit_router
    from routedvlm.training.split import Split

    labels = import_outcomes(pd.read_csv(GSM8K), "routellm")
    rng = np.random.default_rng(0)
    order = rng.permutation(len(labels))
    train, population = labels.iloc[order[:150]], labels.iloc[order[150:]]
    features = [c for c in labels.columns if c.startswith("feat__prompt__") and train[c].nunique() > 1]
    cfg = TrainConfig(no_mlflow=True, num_boost_round=30, mode="one-shot", num_leaves=4, cv_folds=0)
    router = fit_router(cfg, Split(train, train.head(20), train.head(20)), ["small_direct", "large_direct"], features,
                        [], "gsm8k")
    target = {"kind": "accuracy", "value": 0.9, "loss": loss, **({"test": test} if test else {})}
    tables, spec = coverage.population_tables(router, population, train, target)
    assert spec.kind == loss
    out = coverage.repeat_draws(tables, spec.alpha, 100, DRAWS, DELTA, seed=4, test=spec.test)
    assert out["violation_rate"] <= DELTA + coverage.binomial_slack(DELTA, DRAWS), out
    assert out["feasible_rate"] > 0.5, out  # mixtral alone is right often enough that cheaper rules certify
