"""train-router --router knn: k and the prior chosen on the training rows alone, the same certification and evaluation
as every type (AUROC and Brier per strategy on test rows), and the encoder behind meaning features recorded."""
import numpy as np
import pytest

from routedvlm.errors import TrainingError
from routedvlm.training.config import TrainConfig
from routedvlm.training.knn.trainer import K_GRID, choose_k
from routedvlm.training.meaning import encoder_params
from routedvlm.training.pipeline import train_router
from routedvlm.training.synthetic import make_synthetic_labels


@pytest.fixture(scope="module")
def knn_run(tmp_path_factory):
    labels = make_synthetic_labels(900, seed=11)
    config = TrainConfig(router="knn", mode="one-shot", output_dir=str(tmp_path_factory.mktemp("knn")), no_mlflow=True)
    return train_router(config, labels, {"content_hash": "synthetic-11"})


def test_a_knn_router_trains_certifies_and_reports_auroc_and_brier_per_strategy(knn_run):
    from routedvlm.router import load_router

    policy = knn_run.router.policy
    assert policy.router_type == "knn" and policy.params["knn"]["k"] in K_GRID
    assert all(f.startswith("feat__prompt__") for f in policy.features)
    probs = knn_run.evaluation["probabilities"]
    assert set(probs) == set(policy.strategies)
    # difficulty is visible in the prompt features, so the neighbours rank right above wrong answers
    aucs = [r["auroc"] for r in probs.values() if r["auroc"] is not None]
    assert aucs and np.mean(aucs) > 0.6
    assert np.mean([r["brier"] for r in probs.values()]) < np.mean([r["brier_base_rate"] for r in probs.values()])
    loaded = load_router(knn_run.output_dir / "router")
    test = knn_run.test.head(50)
    assert [d.strategy for d in loaded.decide_batch(test)] == [d.strategy for d in knn_run.router.decide_batch(test)]


def test_k_is_the_one_with_the_least_leave_one_out_loss():
    """Correctness set by the sign of the first feature: with 40 rows per side, a small k fits far better than k=80,
    which reaches across the boundary."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(80, 2)).astype(np.float32)
    y = (x[:, :1] > 0).astype(np.float32)
    bank = {"x": x, "y": y, "mean": np.zeros(2, np.float32), "std": np.ones(2, np.float32)}
    k, prior, loss = choose_k(bank, ["small_direct"], ["feat__prompt__a", "feat__prompt__b"])
    assert k <= 20 and loss < 0.4


def test_meaning_features_need_the_encoder_named_in_the_labels_metadata():
    assert encoder_params({}, ["feat__prompt__question_chars"]) == {}
    spec = {"kind": "sentence", "source": "/enc", "dims": 4, "weights_sha256": "sha256:ab"}
    assert encoder_params({"encoder": spec}, ["feat__prompt__meaning_000"]) == {"encoder": spec}
    with pytest.raises(TrainingError, match=r"^The labels have meaning features \(feat__prompt__meaning_\*\) but their "
                                            r"metadata names no encoder"):
        encoder_params({}, ["feat__prompt__meaning_000"])
