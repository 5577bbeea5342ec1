"""RoutedVLM with a router on meaning features: it loads the encoder the router names, computes the features with the
labeller's code, routes by what the question means, and refuses an encoder whose weights changed."""
import numpy as np
import pytest

APPLES = ["How many apples are in the basket?", "Count the apples on the table.", "How many apples can you see?"]
OTHER = ["What colour is the car?", "Is the door open? Answer yes or no.", "What is written on the sign?"]


@pytest.fixture(autouse=True, scope="module")
def _registry_restored():
    from routedvlm.inference.encoders import unregister_meaning

    yield
    unregister_meaning()


@pytest.fixture(scope="module")
def meaning_router(tmp_path_factory):
    """A one-shot knn router (k = 1) on a tiny encoder's meaning features: small_direct right on the apple questions."""
    from routedvlm.inference.encoders import build_tiny_sentence_encoder, load_meaning
    from routedvlm.router import Policy
    from routedvlm.router.knn import KNNRouter

    root = tmp_path_factory.mktemp("meaning-router")
    meaning = load_meaning(str(build_tiny_sentence_encoder(root / "encoder", seed=0, hidden_size=32)), dims=8)
    x = meaning.values(APPLES + OTHER).astype(np.float32)
    y = np.array([[1, 1]] * 3 + [[0, 1]] * 3, dtype=np.float32)
    policy = Policy(router_type="knn", mode="one-shot", strategies=["small_direct", "large_direct"],
                    features=meaning.names, expected_cost_ms={"small_direct": 10.0, "large_direct": 30.0}, tau=0.5,
                    fallback="large_direct", params={"knn": {"k": 1, "prior": 0.0}, "encoder": meaning.spec()})
    return KNNRouter(policy, {"x": x, "y": y, "mean": x.mean(0), "std": x.std(0)}).save(root / "router"), meaning


def test_routed_vlm_routes_by_meaning_with_the_encoder_the_router_names(meaning_router, tiny_pair, make_pipeline,
                                                                       images):
    from routedvlm.inference.encoders import unregister_meaning
    from routedvlm.inference.features import compute_features
    from routedvlm.inference.routed import RoutedVLM

    folder, meaning = meaning_router
    unregister_meaning()  # a fresh process: only the router's policy.json says which encoder to load
    vlm = RoutedVLM(make_pipeline(*tiny_pair), str(folder))
    outs = vlm.generate(image=[images["square"]] * 6, question=APPLES + OTHER)
    assert [o.strategy for o in outs] == ["small_direct"] * 3 + ["large_direct"] * 3  # each is its own neighbour
    live = outs[0].decision["features"]
    assert np.allclose([live[n] for n in meaning.names], meaning.values(APPLES[:1])[0], atol=1e-5)
    assert live == compute_features(APPLES[0], [images["square"]], names=meaning.names)


def test_a_router_whose_encoder_weights_changed_is_not_used(meaning_router, tiny_pair, make_pipeline, images, tmp_path):
    import json
    import shutil

    from routedvlm.inference.encoders import build_tiny_sentence_encoder
    from routedvlm.inference.routed import RoutedVLM

    folder, meaning = meaning_router
    moved = shutil.copytree(folder, tmp_path / "router")
    policy = json.loads((moved / "policy.json").read_text())
    policy["params"]["encoder"]["source"] = str(build_tiny_sentence_encoder(tmp_path / "other", seed=9, hidden_size=32))
    (moved / "policy.json").write_text(json.dumps(policy))
    vlm = RoutedVLM(make_pipeline(*tiny_pair), str(moved))  # refused at load time: the fallback policy serves
    assert str(vlm.router_error).startswith(f"ConfigError: The router's encoder {str(tmp_path / 'other')!r} has weights_sha256")
    out = vlm.generate(image=images["square"], question=APPLES[0])
    assert out.decision.get("features", {}).keys().isdisjoint(meaning.names)  # never decided on another encoder
