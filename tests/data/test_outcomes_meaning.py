"""`import-outcomes --encoder`: imported prompts get the meaning features, the labels' metadata names the encoder, and a
router trained on them computes the same numbers at run time from the encoder it records."""
import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from routedvlm.data.labels.cli import main

SLICE = "tests/data/routellm_gsm8k/gsm8k_slice.csv"


@pytest.fixture(autouse=True, scope="module")
def _registry_restored():
    """The meaning columns leave the feature registry after this module (other tests label without an encoder)."""
    from routedvlm.inference.encoders import unregister_meaning

    yield
    unregister_meaning()


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    from routedvlm.inference.encoders import build_tiny_sentence_encoder

    root = tmp_path_factory.mktemp("meaning-import")
    encoder = build_tiny_sentence_encoder(root / "encoder", seed=0, hidden_size=32)
    out = root / "gsm8k.parquet"
    assert main(["import-outcomes", "--layout", "routellm", SLICE, "--out", str(out), "--encoder", str(encoder),
                 "--encoder-dims", "6"]) == 0
    return out, encoder


def test_imported_prompts_get_meaning_features_and_the_metadata_names_the_encoder(imported):
    out, encoder = imported
    labels = pd.read_parquet(out)
    meta = json.loads(pq.read_schema(out).metadata[b"routedvlm"])["encoder"]
    names = [f"feat__prompt__meaning_{i:03d}" for i in range(6)]
    assert meta["features"] == names and meta["dims"] == 6 and meta["source"] == str(encoder)
    assert meta["weights_sha256"].startswith("sha256:") and meta["ms_per_prompt"] > 0
    assert all(np.isfinite(labels[n]).all() for n in names) and labels[names].std().min() > 0
    assert "feat__prompt__question_chars" in labels  # the length features stay


def test_a_router_trained_on_them_records_the_encoder_and_the_runtime_recomputes_the_same_values(imported, tmp_path):
    from routedvlm.inference.encoders import encoder_for_policy
    from routedvlm.inference.features import compute_features
    from routedvlm.training.config import TrainConfig
    from routedvlm.training.pipeline import train_router

    out, encoder = imported
    config = TrainConfig(router="knn", data=str(out), mode="one-shot", features=["feat__prompt__meaning_*"],
                         output_dir=str(tmp_path / "run"), no_mlflow=True)
    result = train_router(config)
    spec = result.router.policy.params["encoder"]
    assert spec["weights_sha256"] == json.loads(pq.read_schema(out).metadata[b"routedvlm"])["encoder"]["weights_sha256"]
    encoder_for_policy(result.router.policy.params)
    labels = pd.read_parquet(out).head(5)
    for _, row in labels.iterrows():
        live = compute_features(row["question"], (), {}, names=result.router.policy.features)
        assert np.allclose([live[f] for f in result.router.policy.features], row[result.router.policy.features].to_numpy(
            dtype=float), atol=1e-5)


def test_an_encoder_that_is_not_there_is_an_error_naming_the_flag(tmp_path, capsys):
    code = main(["import-outcomes", "--layout", "routellm", SLICE, "--out", str(tmp_path / "x.parquet"),
                 "--encoder", str(tmp_path / "nope")])
    assert code == 2
    assert capsys.readouterr().err.startswith("error: The `encoder` parameter must be a folder or hub id")
