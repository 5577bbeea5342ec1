"""train-router fixtures: synthetic labels with a known ground truth, and one model trained on them per session."""
import pytest

from routedvlm.training.config import TrainConfig
from routedvlm.training.synthetic import make_synthetic_labels, write_synthetic_labels

N_ROWS = 4000


@pytest.fixture(scope="session")
def synthetic_df():
    return make_synthetic_labels(N_ROWS, seed=0)


@pytest.fixture(scope="session")
def labels_path(tmp_path_factory):
    return write_synthetic_labels(tmp_path_factory.mktemp("labels") / "labels.parquet", 1500, seed=1)


@pytest.fixture(scope="session")
def trained(synthetic_df, tmp_path_factory):
    """A cascade policy at the default target (0.98 of the best single strategy), without MLflow."""
    from routedvlm.training.pipeline import train_router

    out = tmp_path_factory.mktemp("trained")
    config = TrainConfig(output_dir=str(out), no_mlflow=True, num_boost_round=120)
    template = {"name": "custom", "text": "{question} Be brief.", "instructions": None}
    return train_router(config, synthetic_df.copy(), {"content_hash": "synthetic-0", "prompt_template": template})
