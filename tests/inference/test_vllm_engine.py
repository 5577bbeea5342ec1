"""The in-process vLLM engine side on the toy pair (marked `vllm_engine`: runs in .venv-vllm, `make test-vllm-engine`):
every strategy answers as the local transformers side does, the escalation's reuse of the large_direct prefix is
the engine's own count, measured calls are cold (cache_salt), and `routedvlm label` on engine sides batches many
samples and writes the same label rows as the serial local labeller."""
import os

import pytest

pytestmark = pytest.mark.vllm_engine
N = 12
K_GRID = (4, 8, 16)
for _name, _value in (("VLLM_TARGET_DEVICE", "cpu"), ("VLLM_CPU_KVCACHE_SPACE", "1"),
                      ("VLLM_CPU_OMP_THREADS_BIND", "nobind"), ("VLLM_NO_USAGE_STATS", "1")):
    os.environ.setdefault(_name, _value)


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory):
    from routedvlm.data.toyworld.make_labels import write_split

    return write_split("eval", N, 17, tmp_path_factory.mktemp("toy-data"))


@pytest.fixture(scope="module")
def engines():
    from routedvlm.data.toyworld.make_labels import checkpoint_pair
    from routedvlm.inference.sides import load_side

    small, large = (load_side(f"vllm:{p}") for p in checkpoint_pair())
    yield small, large
    small.close()
    large.close()


def _pipe(small, large):
    from routedvlm.data.toyworld.make_labels import MAX_DIRECT_TOKENS, MAX_REASON_TOKENS
    from routedvlm.inference import CollaborativePipeline

    return CollaborativePipeline(small, large, k_grid=K_GRID, max_direct_tokens=MAX_DIRECT_TOKENS,
                                 max_reason_tokens=MAX_REASON_TOKENS)


def _label_args(data, out, small, large, *extra):
    from routedvlm.data.toyworld.make_labels import MAX_DIRECT_TOKENS, MAX_REASON_TOKENS

    return ["label", "--small", str(small), "--large", str(large), "--dataset", str(data), "--adapter", "toyworld",
            "--out", str(out), "--k-grid", ",".join(map(str, K_GRID)), "--max-new-tokens", str(MAX_DIRECT_TOKENS),
            "--max-reason-tokens", str(MAX_REASON_TOKENS), "--device", "cpu", "--no-progress", *extra]


@pytest.fixture(scope="module")
def local_labels(toy_data, tmp_path_factory):
    """The serial local labeller's rows for the same samples, from the project's .venv: this venv's transformers
    (vLLM's pin) is not the one the local side is built for ($ROUTEDVLM_LOCAL_PYTHON overrides the interpreter)."""
    import subprocess
    from pathlib import Path

    from routedvlm.data.labels.schema import read_labels
    from routedvlm.data.toyworld.make_labels import checkpoint_pair

    root = Path(__file__).resolve().parents[2]
    python = os.environ.get("ROUTEDVLM_LOCAL_PYTHON", str(root / ".venv" / "bin" / "python"))
    out = tmp_path_factory.mktemp("local") / "local.parquet"
    code = "import sys; from routedvlm.cli import main; sys.exit(main(sys.argv[1:]))"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([python, "-c", code, *_label_args(toy_data, out, *checkpoint_pair())], env=env,
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    return read_labels(out)


def _samples(data, n):
    from routedvlm.data.labelling.config import LabelConfig
    from routedvlm.data.labelling.per_sample import _image
    from routedvlm.data.labelling.sources import open_source

    cfg = LabelConfig(small="s", large="l", dataset=str(data), out="unused.parquet", adapter="toyworld")
    _, keyed, load = open_source(cfg)
    return [(s := load(p, sid), _image(s)) for p, sid in keyed[:n]]


def test_every_strategy_answers_as_the_local_side_with_engine_measured_reuse(engines, toy_data, local_labels):
    local, _ = local_labels
    want = local.set_index("sample_id")
    engine = _pipe(*engines)
    for sample, image in _samples(toy_data, 4):
        got = engine.run_many(image, sample.prompt)
        for sid, res in got.items():
            assert res.answer == want.loc[sample.sample_id, f"answer__{sid}"], (sample.sample_id, sid)
            assert res.output_tokens == want.loc[sample.sample_id, f"output_tokens__{sid}"], (sample.sample_id, sid)
        for k in K_GRID:
            records = {r["stage"]: r for r in got[f"transfer_{k}"].trace}
            call, prefix = records["large_transfer"], records["large_prefix"]
            # the two-stage call reused whole 32-token blocks of the large_direct prompt, by the engine's count
            assert call["cached_tokens"] > 0 and call["cached_tokens"] % 32 == 0 and call["engine"]
            assert prefix["prefill_tokens"] == call["cached_tokens"] and "cold_ms" in prefix
        for sid in ("small_direct", "large_reason"):  # standalone calls are cold (a fresh cache_salt)
            assert got[sid].trace[-1]["cached_tokens"] == 0


def test_label_on_engine_sides_batches_samples_and_equals_the_serial_local_labeller(engines, toy_data, tmp_path,
                                                                                      local_labels):
    from routedvlm.data.labelling.config import LabelConfig
    from routedvlm.data.labelling.job import run_labelling
    from routedvlm.data.labels.schema import read_labels
    from routedvlm.data.toyworld.make_labels import MAX_DIRECT_TOKENS, MAX_REASON_TOKENS

    small, large = engines
    cfg = LabelConfig(small=f"vllm:{small.name}", large=f"vllm:{large.name}", out=str(tmp_path / "engine.parquet"),
                      dataset=str(toy_data), adapter="toyworld", k_grid=K_GRID, max_new_tokens=MAX_DIRECT_TOKENS,
                      max_reason_tokens=MAX_REASON_TOKENS, device="cpu", progress=False, concurrency=8, flush_every=4)
    steps_before = large.driver.steps
    log = large.request_log = []
    try:
        summary = run_labelling(cfg, pipe=_pipe(small, large))
    finally:
        large.request_log = None
    local, _ = local_labels
    got, meta = read_labels(tmp_path / "engine.parquet")
    assert summary.labelled_now == N and got["error"].isna().all(), got["error"].dropna().tolist()
    assert list(got["sample_id"]) == list(local["sample_id"])
    compared = [c for c in local.columns if c.startswith(("answer__", "correct__", "output_tokens__"))]
    assert len(compared) > 20
    for col in compared:
        assert got[col].tolist() == local[col].tolist(), col
    assert (meta["latency_source"], meta["requests_in_flight"], meta["runner"]) == ("batched-wall-clock", 8, "threads")
    assert meta["models"]["large"]["engine"] == "vllm" and meta["models"]["large"]["vllm"]
    # the large engine ran the samples' calls in fewer steps than they decoded tokens: they shared its batches
    steps = large.driver.steps - steps_before
    assert len(log) > 6 * N and steps < sum(len(out.outputs[0].token_ids) for *_, out in log)
