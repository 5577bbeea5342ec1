"""The small VLM's state features (`feat__small_direct__state_<i>`): `routedvlm labels add-features` adds them to a
labels table (recording which model, layer, projection seed and dims), RoutedVLM computes the same numbers at run time
from the small_direct pass it pays, a router's policy records the state, and a failed run never loses the input table."""
import json

import numpy as np
import pandas as pd
import pytest

from label_world import label, label_args, make_world


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("state-world")
    world = make_world(root, 4)
    assert label(*label_args(world, root / "labels.parquet")) == 0
    world.labels = root / "labels.parquet"
    return world


@pytest.fixture(scope="module")
def augmented(world):
    from routedvlm.data.labels.cli import main

    out = world.root / "with-state.parquet"
    assert main(["add-features", str(world.labels), "--out", str(out), "--small", world.small, "--state-dims", "4",
                 "--state-seed", "7", "--no-progress"]) == 0
    return out


@pytest.fixture(autouse=True, scope="module")
def _registry_restored():
    from routedvlm.inference.encoders.state import unregister_state

    yield
    unregister_state()


def test_add_features_records_the_model_layer_projection_and_keeps_every_column(world, augmented):
    from routedvlm.data.labels.schema import read_labels
    from routedvlm.router.checkpoints import weights_hash

    before, _ = read_labels(world.labels)
    after, meta = read_labels(augmented)
    names = [f"feat__small_direct__state_{i:03d}" for i in range(4)]
    assert list(after.columns) == list(before.columns) + names
    pd.testing.assert_frame_equal(after[before.columns], before)
    assert np.isfinite(after[names].to_numpy()).all() and after[names].to_numpy().std() > 0
    state = meta["state"]
    assert (state["weights_sha256"], state["layer"], state["projection_seed"], state["dims"]) == (
        weights_hash(world.small), 1, 7, 4)  # the tiny small model has 2 decoder layers: -1 is layer 1
    assert state["recomputed"]["answers_equal_labels"] == world.n  # the same small_direct pass as the labeller's


def test_routed_vlm_computes_the_same_state_features_and_pays_small_direct(world, augmented):
    from routedvlm.data.labels.schema import read_labels
    from routedvlm.inference import CollaborativePipeline, VLM
    from routedvlm.inference.encoders.state import unregister_state
    from routedvlm.inference.routed import RoutedVLM
    from routedvlm.router import Policy
    from routedvlm.router.knn import KNNRouter
    from routedvlm.training.fit import paid_stages_for
    from routedvlm.training.meaning import encoder_params

    labels, meta = read_labels(augmented)
    names = meta["state"]["features"]
    assert paid_stages_for(names, "cascade") == ["large_direct", "small_direct"]
    x = labels[names].to_numpy(np.float32)
    policy = Policy(router_type="knn", mode="cascade", strategies=["small_direct", "large_direct"], features=names,
                    expected_cost_ms={"small_direct": 10.0, "large_direct": 30.0}, tau=0.5, fallback="large_direct",
                    paid_stages=paid_stages_for(names, "cascade"),
                    params={"knn": {"k": 1, "prior": 0.0}, **encoder_params(meta, names)})
    folder = KNNRouter(policy, {"x": x, "y": np.ones((len(x), 2), np.float32), "mean": x.mean(0),
                                "std": x.std(0) + 1e-6}).save(world.root / "router")
    saved = json.loads((folder / "policy.json").read_text())["params"]["state"]
    assert saved["weights_sha256"] == meta["state"]["weights_sha256"] and saved["projection_seed"] == 7
    unregister_state()  # a fresh process: only policy.json says what to capture
    gen = meta["generation"]
    pipe = CollaborativePipeline(VLM.from_pretrained(world.small), VLM.from_pretrained(world.large),
                                 max_direct_tokens=gen["max_direct_tokens"], min_new_tokens=gen["min_new_tokens"])
    vlm = RoutedVLM(pipe, str(folder))
    assert vlm.router is not None, vlm.router_error
    from PIL import Image
    from io import BytesIO

    data = pd.read_parquet(world.data)
    for i in range(2):
        row = labels.iloc[i]
        image = Image.open(BytesIO(data.loc[data.sample_id == row.sample_id, "image"].iloc[0]))
        out = vlm.generate(image=image, question=row.question)
        assert out.models == ["small", "large"]  # the cascade paid small_direct beside large_direct
        live = out.decision["features"]
        assert np.allclose([live[n] for n in names], row[names].to_numpy(float), rtol=1e-5, atol=1e-6)


def test_a_router_on_another_small_model_is_not_used(world, augmented):
    from routedvlm.data.labels.schema import read_labels
    from routedvlm.errors import ConfigError
    from routedvlm.inference import VLM
    from routedvlm.inference.encoders.state import state_for_policy

    _, meta = read_labels(augmented)
    with pytest.raises(ConfigError, match="^The router's state features were made by the small model"):
        state_for_policy({"state": meta["state"]}, VLM.from_pretrained(world.large))


def test_training_refuses_state_columns_without_their_metadata():
    from routedvlm.errors import TrainingError
    from routedvlm.training.meaning import encoder_params

    with pytest.raises(TrainingError, match="^The labels have state features"):
        encoder_params({}, ["feat__small_direct__state_000"])
    assert encoder_params({}, ["feat__prompt__question_chars"]) == {}


def test_a_failed_add_features_keeps_the_input_table(world, monkeypatch):
    import shutil

    from routedvlm.data.labels import add_features
    from routedvlm.inference import CollaborativePipeline

    copy = shutil.copy(world.labels, world.root / "in-place.parquet")
    original = open(copy, "rb").read()
    calls = []

    def broken(self, image, question, strategy):
        calls.append(strategy)
        if len(calls) == 3:
            raise RuntimeError("model crashed")
        return real(self, image, question, strategy)

    real = CollaborativePipeline.run
    monkeypatch.setattr(CollaborativePipeline, "run", broken)
    with pytest.raises(RuntimeError, match="model crashed"):
        add_features.add_state_features(copy, None, small=world.small, dims=4)
    assert open(copy, "rb").read() == original
    assert sorted(p.name for p in world.root.iterdir() if p.name.startswith(".in-place")) == []


def test_add_features_names_a_wrong_output(world, capsys):
    from routedvlm.data.labels.cli import main

    assert main(["add-features", str(world.labels), "--out", str(world.root / "out.csv"), "--no-progress"]) == 2
    assert "error: `--out` must be a .parquet file" in capsys.readouterr().err


def test_the_projection_is_fixed_by_the_recorded_spec():
    from routedvlm.inference.encoders.state import StateFeatures
    from routedvlm.inference.sides.local.hidden import HiddenStates

    state = StateFeatures("m", n_layers=3, hidden_size=8, layer=-1, dims=3, seed=5, weights_sha256="sha256:x")
    vec = np.arange(8, dtype=np.float32)
    hidden = HiddenStates([2], {2: vec}, {2: np.zeros((0, 8), np.float32)})
    expected = vec @ (np.random.default_rng(5).standard_normal((8, 3)) / np.sqrt(3)).astype(np.float32)
    assert np.allclose(state.values(hidden), expected)
    again = StateFeatures.from_spec(state.spec())  # what a router rebuilds from policy.json
    assert np.array_equal(again.values(hidden), state.values(hidden)) and again.names == state.names
    assert state.spec()["layer"] == 2 and state.spec()["stage"] == "small_direct"


def test_the_labeller_writes_the_same_state_features_as_add_features(world, tmp_path):
    from routedvlm.data.labels.add_features import add_state_features
    from routedvlm.data.labels.schema import read_labels

    assert label(*label_args(world, tmp_path / "labelled.parquet", "--state-dims", "4")) == 0
    labelled, meta = read_labels(tmp_path / "labelled.parquet")
    added, added_meta = read_labels(add_state_features(world.labels, tmp_path / "added.parquet", small=world.small,
                                                       dims=4))
    names = meta["state"]["features"]
    assert names == added_meta["state"]["features"] and len(names) == 4
    assert np.allclose(labelled[names].to_numpy(float), added[names].to_numpy(float), rtol=1e-5, atol=1e-6)
    assert {k: v for k, v in meta["state"].items()} == {k: v for k, v in added_meta["state"].items() if k != "recomputed"}


def test_a_labelling_run_without_state_features_computes_none(world, tmp_path):
    from routedvlm.data.labels.schema import read_labels

    assert label(*label_args(world, tmp_path / "plain.parquet")) == 0  # after runs that registered state columns
    labelled, meta = read_labels(tmp_path / "plain.parquet")
    assert "state" not in meta and not [c for c in labelled.columns if "__state_" in c]
