"""train-router --router mf: rank and L2 chosen by cross-validation on the training rows alone, the same certification
and evaluation as every type (AUROC and Brier per strategy on test rows), the saved router deciding as the trained one."""
import numpy as np
import pytest

from routedvlm.training.config import TrainConfig
from routedvlm.training.mf.trainer import L2_GRID, RANK_GRID, choose, fit_arrays, log_loss
from routedvlm.training.pipeline import train_router
from routedvlm.training.synthetic import make_synthetic_labels


@pytest.fixture(scope="module")
def mf_run(tmp_path_factory):
    labels = make_synthetic_labels(900, seed=11)
    config = TrainConfig(router="mf", mode="one-shot", output_dir=str(tmp_path_factory.mktemp("mf")), no_mlflow=True)
    return train_router(config, labels, {"content_hash": "synthetic-11"})


def test_an_mf_router_trains_certifies_and_reports_auroc_and_brier_per_strategy(mf_run):
    from routedvlm.router import load_router

    policy = mf_run.router.policy
    assert policy.router_type == "mf"
    assert policy.params["mf"]["rank"] in RANK_GRID and policy.params["mf"]["l2"] in L2_GRID
    assert all(f.startswith("feat__prompt__") for f in policy.features)
    probs = mf_run.evaluation["probabilities"]
    assert set(probs) == set(policy.strategies)
    aucs = [r["auroc"] for r in probs.values() if r["auroc"] is not None]
    assert aucs and np.mean(aucs) > 0.6  # difficulty is visible in the prompt features
    assert np.mean([r["brier"] for r in probs.values()]) < np.mean([r["brier_base_rate"] for r in probs.values()])
    loaded = load_router(mf_run.output_dir / "router")
    test = mf_run.test.head(50)
    assert [d.strategy for d in loaded.decide_batch(test)] == [d.strategy for d in mf_run.router.decide_batch(test)]


def test_the_fit_recovers_a_shared_direction_and_cross_validation_prefers_it_to_noise():
    """Two strategies right on the same side of one direction of ten features: the fitted model ranks held-out rows
    almost perfectly and its held-out log loss is far below the base rate's."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(600, 10))
    score = x[:, 0] - x[:, 1]
    y = np.stack([score > 0.5, score > -0.5], axis=1).astype(float)
    rank, l2, loss = choose(x[:400], y[:400], seed=0)
    arrays = fit_arrays(x[:400], y[:400], rank, l2, seed=0)
    held = log_loss(arrays, x[400:], y[400:])
    base = y[:400].mean(axis=0)
    base_loss = float(-np.mean(y[400:] * np.log(base) + (1 - y[400:]) * np.log(1 - base)))
    assert held < 0.5 * base_loss and loss < 0.5 * base_loss
