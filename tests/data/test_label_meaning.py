"""`routedvlm label --encoder`: the labeller adds the meaning features of each sample's question (the code RoutedVLM
runs) and records the encoder in the labels' metadata."""
import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from label_world import label, label_args, make_world


@pytest.fixture(autouse=True, scope="module")
def _registry_restored():
    from routedvlm.inference.encoders import unregister_meaning

    yield
    unregister_meaning()


def test_labels_carry_the_meaning_features_and_name_their_encoder(tmp_path):
    from routedvlm.inference.encoders import SentenceEncoder, build_tiny_sentence_encoder, MeaningFeatures

    world = make_world(tmp_path, 3)
    encoder = build_tiny_sentence_encoder(tmp_path / "encoder", seed=0, hidden_size=32)
    out = tmp_path / "labels.parquet"
    assert label(*label_args(world, out, "--encoder", str(encoder), "--encoder-dims", "4",
                             "--strategies", "small_direct,large_direct")) == 0
    labels = pd.read_parquet(out)
    meta = json.loads(pq.read_schema(out).metadata[b"routedvlm"])
    names = [f"feat__prompt__meaning_{i:03d}" for i in range(4)]
    assert meta["encoder"]["features"] == names and meta["encoder"]["source"] == str(encoder)
    assert meta["run_settings"]["encoder"] == str(encoder) and meta["run_settings"]["encoder_dims"] == 4
    expected = MeaningFeatures(SentenceEncoder(str(encoder)), 4).values(labels["question"].tolist())
    assert np.allclose(labels[names].to_numpy(dtype=float), expected, atol=1e-5)


def test_encoder_dims_must_be_a_positive_integer():
    from routedvlm.data.labelling.config import LabelConfig
    from routedvlm.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^The `encoder_dims` setting must be a positive integer. Got 0 instead"):
        LabelConfig(small="s", large="l", dataset="d", out="o", encoder="enc", encoder_dims=0)
