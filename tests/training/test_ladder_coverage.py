"""The certificate holds on a ladder: a cascade that climbs (pays small_direct, mid_direct) routed over every ladder
strategy, 1000 calibration draws from an 8000-row population of the synthetic ladder whose truth is known: a
certified member with population risk above alpha appears in at most delta of the draws (within binomial slack), a
good router certifies, and the same count without the test finds violations."""
import pytest

from routedvlm.training.calibration import coverage

DRAWS, N_CAL, DELTA = 1000, 300, 0.1


@pytest.fixture(scope="module")
def ladder_world():
    from routedvlm.training.config import TrainConfig
    from routedvlm.training.costs import label_strategies
    from routedvlm.training.lightgbm.trainer import fit_router
    from routedvlm.training.split import Split
    from routedvlm.training.synthetic_ladder import make_ladder_labels

    train = make_ladder_labels(1500, seed=21)
    population = make_ladder_labels(8000, seed=22)
    cfg = TrainConfig(no_mlflow=True, num_boost_round=60, cv_folds=0)
    paid = ["small_direct", "mid_direct"]
    features = [c for c in train.columns if c.startswith("feat__") and set(c.split("__")[1].split("+")) <=
                {"prompt", *paid}]
    router = fit_router(cfg, Split(train, train.head(20), train.head(20)), label_strategies(train), features, paid,
                        "synthetic-ladder")
    assert router.policy.ladder == ["small", "mid", "large"] and router.policy.paid_stages == paid
    tables, spec = coverage.population_tables(router, population, train, {"kind": "accuracy", "value": 0.95})
    return tables, spec, population


def test_ladder_certificates_hold_over_repeated_draws(ladder_world):
    tables, spec, population = ladder_world
    assert spec.reference == "large_reason" and {"tau", "lagrangian", "baselines"} <= set(tables)
    out = coverage.repeat_draws(tables, spec.alpha, N_CAL, DRAWS, DELTA, seed=3)
    assert out["violation_rate"] <= DELTA + coverage.binomial_slack(DELTA, DRAWS), out
    assert out["feasible_rate"] >= 0.9, out
    assert out["chosen_mean_latency_ms"] < 0.5 * float(population["latency_ms__large_reason"].mean()), out
    assert out["naive_violation_rate"] > 2 * DELTA > out["violation_rate"], out
