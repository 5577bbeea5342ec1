"""The meaning feature family (inference/encoders): a sentence encoder from a folder, its identity and file hashes,
the seeded projection, the same numbers batched (labeller, importer) and one request at a time (runtime), and the
check that a router's encoder is the one it was trained with."""
import numpy as np
import pytest

from routedvlm.errors import ConfigError
from routedvlm.inference.encoders import (MeaningFeatures, SentenceEncoder, build_tiny_sentence_encoder,
                                          encoder_for_policy, load_meaning)
from routedvlm.inference.features import compute_features, feature_names

QUESTIONS = ["How many apples are on the table?", "Is the sky blue? Answer yes or no.", "What is 12 plus 30?"]


@pytest.fixture(autouse=True, scope="module")
def _registry_restored():
    """The meaning columns leave the feature registry after this module (other tests label without an encoder)."""
    from routedvlm.inference.encoders import unregister_meaning

    yield
    unregister_meaning()


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory):
    return build_tiny_sentence_encoder(tmp_path_factory.mktemp("encoder") / "tiny", seed=0, hidden_size=32)


def test_a_sentence_encoder_gives_one_unit_vector_per_question(tiny_encoder):
    emb = SentenceEncoder(str(tiny_encoder)).embed(QUESTIONS)
    assert emb.shape == (3, 32) and emb.dtype == np.float32
    assert np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    assert not np.allclose(emb[0], emb[1])  # different questions, different vectors


def test_batched_features_equal_the_runtime_features_of_one_request(tiny_encoder):
    """The importer and the labeller embed in batches; RoutedVLM one request at a time through compute_features."""
    meaning = load_meaning(str(tiny_encoder), dims=8, seed=3)
    assert meaning.names == [f"feat__prompt__meaning_{i:03d}" for i in range(8)]
    assert set(meaning.names) <= set(feature_names(("prompt",)))  # registered in the one feature registry
    frame = meaning.frame(QUESTIONS, batch_size=2)
    for i, q in enumerate(QUESTIONS):
        one = compute_features(q, (), {}, names=meaning.names)
        assert np.allclose([one[n] for n in meaning.names], frame.iloc[i].to_numpy(), atol=1e-5)


def test_the_projection_is_fixed_by_its_seed_and_a_small_encoder_stays_whole(tiny_encoder):
    enc = SentenceEncoder(str(tiny_encoder))
    a, b, c = (MeaningFeatures(enc, 4, seed=s).values(QUESTIONS) for s in (1, 1, 2))
    assert a.shape == (3, 4) and np.array_equal(a, b) and not np.allclose(a, c)
    whole = MeaningFeatures(enc, 64)
    assert whole.dims == 32 and whole.spec()["projection"] == "none"
    assert np.allclose(whole.values(QUESTIONS), enc.embed(QUESTIONS))
    with pytest.raises(ConfigError, match=r"^The `encoder_dims` parameter must be a positive integer. Got 0 instead"):
        MeaningFeatures(enc, 0)


def test_the_identity_names_the_weights_by_their_hash(tiny_encoder, tmp_path):
    spec = load_meaning(str(tiny_encoder), dims=4).spec()
    assert spec["kind"] == "sentence" and spec["stage"] == "prompt" and spec["hidden_size"] == 32
    assert spec["weights_sha256"].startswith("sha256:") and spec["tokenizer_sha256"].startswith("sha256:")
    other = SentenceEncoder(str(build_tiny_sentence_encoder(tmp_path / "other", seed=1, hidden_size=32))).identity()
    assert other["weights_sha256"] != spec["weights_sha256"]
    assert other["tokenizer_sha256"] == spec["tokenizer_sha256"]  # same tokenizer, other weights


def test_a_folder_that_is_no_encoder_is_refused_with_the_fix(tmp_path):
    with pytest.raises(ConfigError, match=r"^The `encoder` parameter must be a folder or hub id of a text encoder"):
        SentenceEncoder(str(tmp_path))


def test_a_router_loads_its_encoder_and_refuses_other_weights(tiny_encoder, tmp_path):
    assert encoder_for_policy({}) is None
    spec = load_meaning(str(tiny_encoder), dims=4, seed=0).spec()
    meaning = encoder_for_policy({"encoder": spec})
    assert meaning.names == spec["features"]
    assert compute_features(QUESTIONS[0], (), {}, names=spec["features"])  # registered for the runtime
    swapped = build_tiny_sentence_encoder(tmp_path / "swapped", seed=5, hidden_size=32)
    with pytest.raises(ConfigError, match=r"^The router's encoder .* has weights_sha256 sha256:[0-9a-f]+, but the router "
                                          r"was trained with sha256:"):
        encoder_for_policy({"encoder": {**spec, "source": str(swapped)}})


def test_the_encoder_folder_can_move_when_its_files_stay_the_same(tiny_encoder, tmp_path, monkeypatch):
    import shutil

    spec = load_meaning(str(tiny_encoder), dims=4, seed=0).spec()
    moved = shutil.copytree(tiny_encoder, tmp_path / "moved")
    monkeypatch.setenv("ROUTEDVLM_ENCODER", str(moved))
    meaning = encoder_for_policy({"encoder": {**spec, "source": "/gone/encoder"}})
    assert meaning.spec()["source"] == str(moved) and meaning.spec()["weights_sha256"] == spec["weights_sha256"]
