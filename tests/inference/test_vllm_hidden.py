"""The self-probe with a vLLM large side (inference/sides/vllm/hidden.py).

Unmarked (default suite, no vLLM): the layer-id convention, the engine kwargs, and reading a file laid out as vLLM's
connector writes it, checked by hand. Marked `vllm_engine` (.venv-vllm, `make test-vllm-engine`): on the shipped
Qwen3-VL toy large, the vector vLLM's hidden-state extraction saves during large_direct equals what the transformers
side captures for the same sample and layer; a self-probe trains on labels whose large side was the engine (its hidden
states recomputed on the engine) and RoutedVLM with the engine large side decides as with the transformers one.
"""
import os
from types import SimpleNamespace

import numpy as np
import pytest

from routedvlm.errors import ConfigError, ModelLoadError

for _name, _value in (("VLLM_TARGET_DEVICE", "cpu"), ("VLLM_CPU_KVCACHE_SPACE", "1"),
                      ("VLLM_CPU_OMP_THREADS_BIND", "nobind"), ("VLLM_NO_USAGE_STATS", "1")):
    os.environ.setdefault(_name, _value)
LAYERS = [1, 2, 3]  # of the toy large's 4 decoder layers
ATOL, RTOL = 1e-4, 1e-4  # float32 on both sides; measured differences are about 1e-7


def test_transformers_layer_i_is_vllm_aux_layer_i_plus_1():
    from routedvlm.inference.sides.vllm.hidden import aux_layer_ids, engine_kwargs, normalize_layers

    assert aux_layer_ids([3, 1]) == [2, 4]  # sorted: vLLM saves the aux layers in depth order
    assert normalize_layers([-1, 0, -1], 4) == [0, 3]
    with pytest.raises(ConfigError, match=r"^Hidden-state layers must be integers in \[-4, 3\] for this 4-layer"):
        normalize_layers([4], 4)


def test_engine_kwargs_name_the_cpu_connector_by_module(tmp_path):
    from routedvlm.inference.sides.vllm.hidden import engine_kwargs

    kw = engine_kwargs([0, 3], tmp_path / "hs")
    spec = kw["speculative_config"]
    assert spec["method"] == "extract_hidden_states" and spec["num_speculative_tokens"] == 1
    assert spec["draft_model_config"]["hf_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 4]
    kv = kw["kv_transfer_config"]
    assert (kv["kv_connector"], kv["kv_connector_module_path"]) == ("CPUHiddenStatesConnector",
                                                                   "routedvlm.inference.sides.vllm.hidden")
    assert kv["kv_connector_extra_config"]["shared_storage_path"] == str((tmp_path / "hs").resolve())
    assert (tmp_path / "hs").is_dir()
    stock = engine_kwargs([0], tmp_path, connector="ExampleHiddenStatesConnector")["kv_transfer_config"]
    assert "kv_connector_module_path" not in stock
    with pytest.raises(ConfigError, match=r"^engine_kwargs needs at least one decoder layer"):
        engine_kwargs([], tmp_path)


def _saved(tmp_path, n_prompt: int, n_out: int, n_layers: int, hidden: int = 3):
    """A file as the connector writes it with include_output_tokens: rows = prompt + answer tokens but the last;
    value = 100 * token + 10 * layer slot + dim, so every number says where it came from."""
    import torch
    from safetensors.torch import save_file

    rows = n_prompt + n_out - 1
    t, j, d = np.meshgrid(np.arange(rows), np.arange(n_layers), np.arange(hidden), indexing="ij")
    path = tmp_path / "req-1.safetensors"
    save_file({"hidden_states": torch.tensor(100.0 * t + 10.0 * j + d, dtype=torch.float32),
               "token_ids": torch.arange(rows)}, str(path))
    return SimpleNamespace(request_id="req-1", prompt_token_ids=list(range(n_prompt)),
                           kv_transfer_params={"hidden_states_path": str(path)}), path


def test_read_hidden_by_hand(tmp_path):
    from routedvlm.inference.sides.vllm.hidden import read_hidden

    out, path = _saved(tmp_path, n_prompt=4, n_out=3, n_layers=2)
    h = read_hidden(out, [3, 1])
    assert h.layers == [1, 3] and not path.exists()  # read once, then removed
    assert h.prompt_last[1].tolist() == [300, 301, 302]  # last prompt token (index 3), slot 0 = layer 1
    assert h.prompt_last[3].tolist() == [310, 311, 312]
    assert h.answer[3].tolist() == [[410, 411, 412], [510, 511, 512]]  # answer tokens fed back: 2 of 3
    assert h.vector("all_mean", [3]).tolist() == [410, 411, 412]  # mean of rows 3, 4, 5 of slot 1
    assert h.prompt_last[1].dtype == np.float32


def test_read_hidden_refuses_what_it_cannot_read(tmp_path):
    from routedvlm.inference.sides.vllm.hidden import read_hidden

    with pytest.raises(ModelLoadError, match=r"^The vLLM request 'x' returned no 'hidden_states_path'"):
        read_hidden(SimpleNamespace(request_id="x", kv_transfer_params=None, prompt_token_ids=[1]), [0])
    out, _ = _saved(tmp_path, n_prompt=4, n_out=2, n_layers=2)
    with pytest.raises(ModelLoadError, match=r"^The hidden states vLLM saved have shape \(5, 2, 3\); expected .* 3 layers"):
        read_hidden(out, [0, 1, 2])


def test_training_accepts_an_engine_large_side():
    from routedvlm.training.probe.self_probe import large_on_engine, resolve_large

    engine_meta = {"models": {"large": {"name": "nowhere/large", "engine": "vllm", "device": "vllm-engine"}}}
    assert large_on_engine(SimpleNamespace(large=None), engine_meta)
    assert large_on_engine(SimpleNamespace(large="vllm:some/folder"), {})
    assert not large_on_engine(SimpleNamespace(large="some/folder"), engine_meta)
    with pytest.raises(ConfigError, match=r"must be a local checkpoint folder; 'no/such/folder' \(from --large\)"):
        resolve_large(SimpleNamespace(large="vllm:no/such/folder"), engine_meta)


# ---------------------------------------------------------------------------------------------------- vLLM tier
def _large_qwen3vl() -> str:
    from routedvlm.data.toyworld.make_labels import default_checkpoints

    return str(default_checkpoints() / "large-qwen3vl")


def _png_rows(pairs, folder) -> list:
    """[[png path, question], ...] of (PIL image, question) pairs (PNG: the same pixels in the other process)."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, (image, question) in enumerate(pairs):
        image.save(folder / f"{i}.png")
        rows.append([str(folder / f"{i}.png"), question])
    return rows


def _reference(job: dict, folder):
    """(tensors, per-row info) from hidden_reference.py in the project's .venv: the transformers side as the library
    runs it (this venv pins vLLM's older transformers); $ROUTEDVLM_LOCAL_PYTHON overrides the interpreter."""
    import json
    import subprocess
    from pathlib import Path

    from safetensors import safe_open
    from safetensors.numpy import load_file

    root = Path(__file__).resolve().parents[2]
    python = os.environ.get("ROUTEDVLM_LOCAL_PYTHON", str(root / ".venv" / "bin" / "python"))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "job.json").write_text(json.dumps(job))
    out = folder / "reference.safetensors"
    done = subprocess.run([python, str(Path(__file__).with_name("hidden_reference.py")), str(folder / "job.json"),
                           str(out)], env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                          timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    with safe_open(str(out), "np") as fh:
        info = json.loads(fh.metadata()["info"])["rows"]
    return load_file(str(out)), info


def _reference_states(tensors, i: int, layers):
    from routedvlm.inference.sides.local.hidden import HiddenStates

    return HiddenStates(list(layers), {layer: tensors[f"{i}.prompt_last.{layer}"] for layer in layers},
                        {layer: tensors[f"{i}.answer.{layer}"] for layer in layers})


@pytest.fixture(scope="module")
def engine_large():
    from routedvlm.inference.sides.vllm.side import VLLMEngine

    side = VLLMEngine(_large_qwen3vl())
    side.capture_hidden(LAYERS)
    yield side
    side.close()


@pytest.mark.vllm_engine
def test_engine_vector_equals_the_transformers_capture(engine_large, tmp_path):
    from routedvlm.data.toyworld.task import make_samples
    from routedvlm.inference import CollaborativePipeline
    from routedvlm.inference.sides.local.hidden import POSITIONS

    samples = make_samples("eval", 6, seed=5)
    rows = _png_rows([(s.image, s.question) for s in samples], tmp_path / "png")
    ref, info = _reference({"rows": rows, "large": _large_qwen3vl(), "layers": LAYERS, "max_direct_tokens": 8},
                           tmp_path / "ref")
    assert engine_large.returns_hidden_states
    pipe = CollaborativePipeline(engine_large, engine_large, max_direct_tokens=8)
    for i, sample in enumerate(samples):
        got = pipe.run(sample.image, sample.question, "large_direct")
        assert (got.generation.token_ids, got.answer) == (info[i]["token_ids"], info[i]["answer"])
        a, b = _reference_states(ref, i, LAYERS), got.generation.hidden
        assert b.layers == LAYERS
        for layer in LAYERS:
            assert b.answer[layer].shape == a.answer[layer].shape == (len(info[i]["token_ids"]) - 1, 128)
            np.testing.assert_allclose(b.prompt_last[layer], a.prompt_last[layer], rtol=RTOL, atol=ATOL)
            np.testing.assert_allclose(b.answer[layer], a.answer[layer], rtol=RTOL, atol=ATOL)
        for position in POSITIONS:
            np.testing.assert_allclose(b.vector(position, [2]), a.vector(position, [2]), rtol=RTOL, atol=ATOL)


@pytest.mark.vllm_engine
def test_an_engine_without_extraction_says_so():
    from routedvlm.data.toyworld.make_labels import checkpoint_pair
    from routedvlm.errors import ModeUnavailableError
    from routedvlm.inference.sides.vllm.side import VLLMEngine

    side = VLLMEngine(str(checkpoint_pair()[1]))  # the Qwen2-VL toy large: no EAGLE3 interface in vLLM
    assert not side.returns_hidden_states
    with pytest.raises(ModeUnavailableError, match=r"cannot capture hidden states: vLLM extracts them only from"):
        side.capture_hidden([1])


N_LABEL, K_GRID = 80, (4, 8, 16)  # train-router's minimum: 40 train, 20 calibration, 20 test


@pytest.fixture(scope="module")
def engine_labels(engine_large, tmp_path_factory):
    """N_LABEL toy samples labelled with the small toy model (transformers) and the Qwen3-VL large on the engine."""
    from routedvlm.data.labelling.config import LabelConfig
    from routedvlm.data.labelling.job import run_labelling
    from routedvlm.data.toyworld.make_labels import MAX_DIRECT_TOKENS, MAX_REASON_TOKENS, checkpoint_pair, write_split
    from routedvlm.inference import CollaborativePipeline, VLM

    root = tmp_path_factory.mktemp("engine-labels")
    data = write_split("eval", N_LABEL, 23, root)
    small = str(checkpoint_pair()[0])
    pipe = CollaborativePipeline(VLM.from_pretrained(small, device="cpu"), engine_large, k_grid=K_GRID,
                                 max_direct_tokens=MAX_DIRECT_TOKENS, max_reason_tokens=MAX_REASON_TOKENS)
    run_labelling(LabelConfig(small=small, large=f"vllm:{_large_qwen3vl()}", dataset=str(data), adapter="toyworld",
                              out=str(root / "labels.parquet"), k_grid=K_GRID, max_new_tokens=MAX_DIRECT_TOKENS,
                              max_reason_tokens=MAX_REASON_TOKENS, device="cpu", progress=False), pipe=pipe)
    return root


@pytest.fixture(scope="module")
def engine_probe(engine_labels):
    from routedvlm.training.config import TrainConfig
    from routedvlm.training.labels_io import load_labels
    from routedvlm.training.pipeline import train_router

    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(engine_labels)
        # vLLM's venv has no matplotlib (integrations/vllm-cpu): the run's PNGs are not what this test checks
        mp.setattr("routedvlm.training.plot.plot_curve", lambda *a, **k: None)
        mp.setattr("routedvlm.training.probability.plot_reliability", lambda *a, **k: None)
        labels, meta = load_labels("labels.parquet")
        config = TrainConfig(router="self-probe", data="labels.parquet", output_dir="run", no_mlflow=True,
                             hidden_layers=[2], hidden_position="all_mean", num_boost_round=20, target_accuracy=0.8,
                             calib_fraction=0.25, test_fraction=0.25)
        return train_router(config, labels, meta), meta, engine_labels


@pytest.mark.vllm_engine
def test_self_probe_trains_on_engine_labels_with_the_engine_s_hidden_states(engine_probe):
    from routedvlm.router.self_probe import HIDDEN_KEY, SelfProbeRouter

    result, meta, root = engine_probe
    router = result.router
    assert meta["models"]["large"]["engine"] == "vllm"
    assert isinstance(router, SelfProbeRouter) and router.policy.params["hidden"]["layers"] == [2]
    recomputed = router.policy.params["recomputed"]
    assert recomputed["side"] == "vllm-engine" and recomputed["answers_equal_labels"] == recomputed["rows"] == N_LABEL
    # the training inputs equal what the transformers side computes for the same rows
    rows = result.test.head(5)
    ref, _ = _reference({"rows": _png_rows(zip(rows["image"], rows["question"]), root / "check-png"),
                         "large": _large_qwen3vl(), "layers": [2], "max_direct_tokens": meta["generation"]
                         ["max_direct_tokens"]}, root / "check-ref")
    for i, got in enumerate(rows[HIDDEN_KEY]):
        np.testing.assert_allclose(got, _reference_states(ref, i, [2]).vector("all_mean"), rtol=RTOL, atol=ATOL)


@pytest.mark.vllm_engine
def test_routedvlm_with_the_engine_large_side_decides_as_with_transformers(engine_probe):
    from routedvlm.data.toyworld.make_labels import MAX_DIRECT_TOKENS, MAX_REASON_TOKENS, checkpoint_pair
    from routedvlm.inference import RoutedVLM
    from routedvlm.router.strategies import LARGE_DIRECT

    result, _, root = engine_probe
    router = result.router
    # a rule that reads the probe on every request, at a threshold that splits these rows both ways
    # (an infeasible certificate leaves a fixed one-shot rule: back to the cascade, which pays large_direct first)
    router.policy.rule, router.policy.mode, router.policy.paid_stages = {"name": "tau"}, "cascade", [LARGE_DIRECT]
    router.policy.tau = float(np.median(router.predict_proba(result.test)[LARGE_DIRECT]))
    router.policy.certificate = {}  # a hand-set rule is not what was certified (load_router refuses a learned rule
    # under an infeasible certificate since the certificates record their bound when infeasible too)
    router.save(root / "tau-router")
    small, large = str(checkpoint_pair()[0]), _large_qwen3vl()
    settings = dict(k_grid=K_GRID, max_direct_tokens=MAX_DIRECT_TOKENS, max_reason_tokens=MAX_REASON_TOKENS)
    test = result.test.head(6)
    rows = _png_rows(zip(test["image"], test["question"]), root / "route-png")
    ref, info = _reference({"rows": rows, "small": small, "large": large, "router": str(root / "tau-router"),
                            "settings": {**settings, "device": "cpu"}}, root / "route-ref")
    on_engine = RoutedVLM.from_pretrained(small, f"vllm:{large}", str(root / "tau-router"), **settings, device="cpu")
    assert on_engine.router is not None, on_engine.router_error
    try:
        for i, (image, question) in enumerate(zip(test["image"], test["question"])):
            got = on_engine(image=image, question=question)
            before = [r["stage"] for r in got.trace[: got.trace.index(got.decision)]]
            assert before.count("large_direct") == 1  # the probe read the pass that answered, no second one
            np.testing.assert_allclose(on_engine.router.last_input, ref[f"{i}.read"], rtol=RTOL, atol=ATOL)
            assert (got.decision["strategy"], got.text) == (info[i]["strategy"], info[i]["answer"])
            assert got.p_correct == pytest.approx(info[i]["p_correct"], abs=1e-2)  # measured: up to 3.7e-3 (inputs within 1e-4, standardised by the head)
    finally:
        on_engine.pipeline.large.close()
