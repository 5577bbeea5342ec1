"""train-router --router lightgbm-pca: the embedding columns reduced by a PCA fitted on the training rows and stored in
the router, LightGBM on the rest + the components, the same certification and evaluation (AUROC, Brier per strategy)."""
import numpy as np
import pytest

from routedvlm.errors import TrainingError
from routedvlm.training.config import TrainConfig
from routedvlm.training.pipeline import train_router
from routedvlm.training.synthetic import make_synthetic_labels

COMPONENTS = 5  # --pca-components (the default is 8)
SPEC = {"kind": "sentence", "source": "/enc", "dims": 24, "weights_sha256": "sha256:ab"}


def _with_embedding(labels, dims=24, seed=0):
    """24 'meaning' columns: random mixes of the prompt's difficulty signal plus noise (a stand-in embedding)."""
    rng = np.random.default_rng(seed)
    signal = labels[[c for c in labels.columns if c.startswith("feat__prompt__")]].to_numpy(dtype=float)
    signal = (signal - signal.mean(axis=0)) / (signal.std(axis=0) + 1e-9)
    emb = signal @ rng.normal(size=(signal.shape[1], dims)) + rng.normal(scale=0.5, size=(len(labels), dims))
    return labels.assign(**{f"feat__prompt__meaning_{i:03d}": emb[:, i] for i in range(dims)})


@pytest.fixture(scope="module")
def pca_run(tmp_path_factory):
    labels = _with_embedding(make_synthetic_labels(900, seed=11))
    config = TrainConfig(router="lightgbm-pca", mode="one-shot", output_dir=str(tmp_path_factory.mktemp("pca")),
                         no_mlflow=True, pca_components=COMPONENTS)
    return train_router(config, labels, {"content_hash": "synthetic-11-emb", "encoder": SPEC})


def test_a_lightgbm_pca_router_reduces_the_embedding_on_training_rows_and_stores_the_transform(pca_run):
    from routedvlm.router import load_router

    router = pca_run.router
    policy = router.policy
    assert policy.router_type == "lightgbm-pca" and policy.params["encoder"] == SPEC
    assert policy.params["lightgbm-pca"]["pca_components"] == COMPONENTS
    assert len(router.reduction.columns) == 24 and len(router.reduction.names) == COMPONENTS
    assert all(c in policy.features for c in router.reduction.columns)  # the router's inputs are the raw columns
    for booster in router.boosters.values():  # ... the boosters' the components
        assert booster.feature_name()[-COMPONENTS:] == router.reduction.names
        assert not any("meaning" in n for n in booster.feature_name())
    probs = pca_run.evaluation["probabilities"]
    aucs = [r["auroc"] for r in probs.values() if r["auroc"] is not None]
    assert aucs and np.mean(aucs) > 0.6
    assert np.mean([r["brier"] for r in probs.values()]) < np.mean([r["brier_base_rate"] for r in probs.values()])
    loaded = load_router(pca_run.output_dir / "router")
    test = pca_run.test.head(50)
    assert [d.strategy for d in loaded.decide_batch(test)] == [d.strategy for d in router.decide_batch(test)]
    row = test.iloc[0].to_dict()
    assert loaded.decide(row).p_correct == pytest.approx(router.decide_batch(test.head(1))[0].p_correct)


def test_labels_without_embedding_columns_are_refused_naming_the_fix(tmp_path):
    config = TrainConfig(router="lightgbm-pca", mode="one-shot", output_dir=str(tmp_path), no_mlflow=True)
    with pytest.raises(TrainingError, match=r"^The router type 'lightgbm-pca' reduces embedding columns .* hold 0\. "
                                            r"Add them \(`routedvlm labels import-outcomes \.\.\. --encoder FOLDER"):
        train_router(config, make_synthetic_labels(400, seed=3), {"content_hash": "synthetic-3"})
