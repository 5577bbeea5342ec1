"""The labelling job (`routedvlm label`, `label merge`) end to end on tiny random VLMs and a local parquet data set."""
import io
import json
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pandas as pd
import pytest

from routedvlm.errors import ConfigError, LabelsError

N_ROWS = 5
BROKEN = "s001"  # its image bytes are not an image


def _png(color) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (64, 64), color).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Tiny model pair + a local parquet data set (one row with broken image bytes)."""
    from routedvlm.inference import build_tiny_pair

    root = tmp_path_factory.mktemp("labelling")
    small, large = build_tiny_pair(root / "models")
    rows = [{"sample_id": f"s{i:03d}", "question": f"What color is bar {i}?", "answer": ["red"],
             "image": _png((40 * i, 120, 60))} for i in range(N_ROWS)]
    rows[1]["image"] = b"not an image"
    data = root / "bars.parquet"
    pd.DataFrame(rows).to_parquet(data)
    return SimpleNamespace(root=root, small=str(small), large=str(large), data=str(data))


def _args(world, out, *extra):
    return ["--small", world.small, "--large", world.large, "--dataset", world.data, "--out", str(out),
            "--k-grid", "2,4", "--max-new-tokens", "3", "--min-new-tokens", "2", "--max-reason-tokens", "6",
            "--min-reason-tokens", "6", "--device", "cpu", "--no-progress", *extra]


def _label(*argv):
    from routedvlm.data.labelling.cli import main

    return main(list(argv))


@pytest.fixture(scope="module")
def full_run(world):
    out = world.root / "full" / "labels.parquet"
    assert _label(*_args(world, out)) == 0
    return out


@pytest.mark.slow
def test_end_to_end_output_follows_the_schema(full_run):
    from routedvlm.data.labels import read_labels, validate_labels

    assert validate_labels(full_run) == []
    df, meta = read_labels(full_run)
    assert sorted(df["sample_id"]) == [f"s{i:03d}" for i in range(N_ROWS)]
    assert meta["k_grid"] == [2, 4] and meta["selector"] == "prefix" and meta["latency_source"] == "wall-clock"
    assert meta["execution_mode"] == "one-stage+two-stage" and meta["scorers"] == {"bars": "exact_match"}
    assert meta["models"]["small"]["revision"].startswith("sha256:") and meta["models"]["large"]["dtype"] == "float32"
    for side in ("small", "large"):  # named by what holds on another machine (weights and config hashes)
        assert meta["models"][side]["weights_hash"] == meta["models"][side]["revision"]
        assert meta["models"][side]["config_hash"].startswith("sha256:")
    assert meta["models"]["small"]["modes"]["reason"]["mode"] == "think" and meta["prompts"]["answer_marker"]
    assert meta["torch_threads"] == 1 == meta["run_settings"]["threads"]  # --threads default: stable latencies
    ok = df[df["error"].isna()]
    assert meta["prompt_template"] == {"name": "none", "text": None, "instructions": None}  # local data: as given
    assert list(ok["question"]) == [f"What color is bar {i}?" for i in (0, 2, 3, 4)]
    for k in ("2", "4", "all"):  # the two-stage increment skips the large prefix the standalone transfer pays
        assert (ok[f"latency_ms__escalate_{k}"] < ok[f"latency_ms__transfer_{k}"]).all()
    assert (ok["feat__prompt__image_count"] == 1).all() and ok["feat__large_direct__answer_tokens"].ge(2).all()
    assert not (full_run.parent / "labels.parquet.parts").exists()


@pytest.mark.slow
def test_a_broken_image_is_recorded_and_the_run_goes_on(full_run):
    from routedvlm.data.labels.schema import read_labels

    df, meta = read_labels(full_run)
    bad = df.set_index("sample_id").loc[BROKEN]
    assert bad["error"].startswith("ImageLoadError: Sample 's001'")
    assert bad["label"] == "none" and not bad["correct__large_direct"] and pd.isna(bad["answer__large_direct"])
    assert meta["n_errors"] == 1 and df["error"].notna().sum() == 1


@pytest.mark.slow
def test_samples_reload_by_id_from_the_metadata(full_run):
    from routedvlm.data.labels.schema import read_labels
    from routedvlm.data.loading import load_samples

    df, meta = read_labels(full_run)
    (sample,) = load_samples(**meta["sample_source"], ids=["s003"])
    assert sample.prompt == df.set_index("sample_id").loc["s003", "question"]


@pytest.mark.slow
def test_features_match_compute_features_on_the_same_results(world, full_run):
    """The labeller's feature columns are exactly inference.features on a run_many of the same sample."""
    from routedvlm.data.labels.schema import read_labels
    from routedvlm.data.loading import load_samples
    from routedvlm.inference import CollaborativePipeline
    from routedvlm.inference.features import compute_features
    from routedvlm.inference.inputs import load_image

    df, meta = read_labels(full_run)
    (sample,) = load_samples(**meta["sample_source"], ids=["s002"])
    pipe = CollaborativePipeline(world.small, world.large, k_grid=(2, 4), **meta["generation"])
    image = load_image(sample.images[0])
    res = pipe.run_many(image, sample.prompt, ["large_direct", "small_direct"])
    feats = compute_features(sample.prompt, [image], res)
    row = df.set_index("sample_id").loc["s002"]
    for name, value in feats.items():
        assert row[name] == pytest.approx(value, rel=1e-6, abs=1e-6), name  # float32 logits, other cache paths


@pytest.mark.slow
def test_existing_output_needs_resume_and_same_settings(world, full_run):
    with pytest.raises(ConfigError, match=r"^The output already exists: .*Pass --resume"):
        _label(*_args(world, full_run))
    with pytest.raises(ConfigError, match=r"^--resume needs the same settings .*threshold: was 0.5, now 0.9"):
        _label(*_args(world, full_run, "--resume", "--threshold", "0.9"))
    assert _label(*_args(world, full_run, "--resume")) == 0  # complete: nothing to do


@pytest.mark.slow
def test_resume_after_kill_loses_and_duplicates_nothing(world, capsys):
    from routedvlm.data.labelling.parts import PartStore
    from routedvlm.data.labels.schema import read_labels

    out = world.root / "killed" / "labels.parquet"
    cmd = [sys.executable, "-m", "routedvlm.cli", "label", *_args(world, out, "--flush-every", "1")]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ})
    store, deadline = PartStore(out), time.monotonic() + 120
    try:
        while not store.part_files() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    stored = store.done_ids()
    assert 1 <= len(stored) < N_ROWS, "the subprocess must die mid-run"
    assert _label(*_args(world, out, "--resume")) == 0
    assert f"({N_ROWS - len(stored)} labelled in this run" in capsys.readouterr().out  # stored ones not redone
    df, _ = read_labels(out)
    assert sorted(df["sample_id"]) == [f"s{i:03d}" for i in range(N_ROWS)]  # none missing, none duplicated


@pytest.mark.slow
def test_shards_merge_to_the_single_run_sample_set(world, full_run):
    from routedvlm.data.labels import read_labels, validate_labels

    shards = [world.root / "shards" / f"part{i}.parquet" for i in range(2)]
    for i, path in enumerate(shards):
        assert _label(*_args(world, path, "--shard", f"{i}/2")) == 0
    ids = [set(read_labels(p)[0]["sample_id"]) for p in shards]
    assert not ids[0] & ids[1]
    merged = world.root / "shards" / "merged.parquet"
    assert _label("merge", str(merged), *map(str, shards)) == 0
    assert validate_labels(merged) == []
    assert set(read_labels(merged)[0]["sample_id"]) == set(read_labels(full_run)[0]["sample_id"])
    with pytest.raises(LabelsError, match=r"^\d+ sample id\(s\) appear in more than one file"):
        _label("merge", str(world.root / "shards" / "twice.parquet"), str(shards[0]), str(shards[0]))
    with pytest.raises(ConfigError, match=r"already exists; remove it or pass --overwrite"):
        _label("merge", str(merged), *map(str, shards))


def _profile() -> dict:
    def fit(x, a, b):
        return {"x": x, "intercept": a, "slope": b}

    def model(scale, params):
        return {"parameters": params, "reference": {"image_tokens": 16, "prefill_tokens": 40},
                "fit": {"vision": fit("image_tokens", 1.0 * scale, 0.1), "prefill": fit("tokens", 0.5 * scale, 0.05),
                        "decode": fit("context_len", 2.0 * scale, 0.001)}}

    return {"format_version": 1, "settings": {"output_tokens": [1, 4]},
            "models": {"tiny-small": model(1.0, 10), "tiny-large": model(3.0, 30)}}


@pytest.mark.slow
def test_cost_profile_gives_deterministic_latencies(world, tmp_path):
    from routedvlm.data.labels.schema import read_labels

    prof = tmp_path / "profile.json"
    prof.write_text(json.dumps(_profile()))
    frames = []
    for i in range(2):
        out = tmp_path / f"cost{i}.parquet"
        assert _label(*_args(world, out, "--cost", str(prof), "--limit", "1",
                             "--strategies", "large_direct,small_direct,transfer_2,transfer_4")) == 0
        frames.append(read_labels(out))
    (a, meta), (b, _) = frames
    cols = [c for c in a.columns if c.startswith("latency_ms__")]
    pd.testing.assert_frame_equal(a[cols], b[cols])
    assert meta["latency_source"] == "cost-model" and meta["cost_models"] == {"small": "tiny-small", "large": "tiny-large"}
    assert meta["k_grid"] == [2, 4] and len(meta["cost_profile_sha256"]) == 64


def test_compose_latencies_worked_example():
    """transfer_4 = small reasoning (decode truncated at 4) + large prefix + large continuation; escalate drops the prefix."""
    from routedvlm.data.labelling.latency import compose_latencies

    def rec(stage, model, v, p, d):
        return {"stage": stage, "model": model, "vision_ms": v, "prefill_ms": p, "decode_ms": d}

    prefix = rec("large_prefix", "large", 10, 20, 0)
    results = {
        "large_direct": SimpleNamespace(trace=[prefix, rec("large_direct", "large", 0, 5, 7)]),
        "transfer_4": SimpleNamespace(trace=[rec("small_reason", "small", 3, 4, 8), prefix,
                                             rec("large_transfer", "large", 0, 6, 9)]),
        "transfer_all": SimpleNamespace(trace=[rec("small_reason", "small", 3, 4, 30), prefix,
                                               rec("large_transfer", "large", 0, 8, 9)]),
    }
    standalone, escalate = compose_latencies(results)
    assert standalone == {"large_direct": 42.0, "transfer_4": 60.0, "transfer_all": 84.0}
    assert escalate == {4: 30.0, "all": 54.0}
    standalone, escalate = compose_latencies(results, lambda side, r: 1.0 if side == "small" else 2.0)
    assert standalone["transfer_4"] == 5.0 and escalate[4] == 3.0


def test_compose_latencies_with_branches_worked_example():
    """run_many splits prefills where prompts branch: each trace lists every call its prompt was built from.
    transfer_4 = small prefix + small reasoning (truncated) + large prefix + branch of K=2 + its own branch + its call."""
    from routedvlm.data.labelling.latency import compose_latencies

    def rec(stage, model, v, p, d):
        return {"stage": stage, "model": model, "vision_ms": v, "prefill_ms": p, "decode_ms": d}

    small_prefix, prefix = rec("small_prefix", "small", 3, 4, 0), rec("large_prefix", "large", 10, 20, 0)
    branch2, branch4 = rec("large_branch", "large", 0, 2, 0), rec("large_branch", "large", 0, 1, 0)
    results = {
        "small_direct": SimpleNamespace(trace=[small_prefix, rec("small_direct", "small", 0, 1, 5)]),
        "transfer_2": SimpleNamespace(trace=[small_prefix, rec("small_reason", "small", 0, 1, 4), prefix, branch2,
                                             rec("large_transfer", "large", 0, 6, 9)]),
        "transfer_4": SimpleNamespace(trace=[small_prefix, rec("small_reason", "small", 0, 1, 8), prefix, branch2,
                                             branch4, rec("large_transfer", "large", 0, 6, 9)]),
    }
    standalone, escalate = compose_latencies(results)
    assert standalone == {"small_direct": 13.0, "transfer_2": 59.0, "transfer_4": 64.0}
    assert escalate == {2: 29.0, 4: 34.0}


@pytest.mark.slow
def test_composed_costs_equal_independent_runs_in_tokens(world):
    """Priced by tokens (a cost model's view), every composed standalone cost equals that of the strategy run on its
    own, and every escalate increment equals that of `escalate` after `large_direct`: the records lose no work."""
    from PIL import Image

    from routedvlm.data.labelling.latency import compose_latencies, trace_ms
    from routedvlm.inference import CollaborativePipeline
    from routedvlm.router.strategies import default_strategies

    def tokens(side, r):
        return r["prefill_tokens"] + r["decode_tokens"] + (1000 if r["vision_ms"] > 0 else 0)

    pipe = CollaborativePipeline(world.small, world.large, k_grid=(2, 4), max_direct_tokens=3, min_new_tokens=2,
                                 max_reason_tokens=6, min_reason_tokens=6)
    image, question = Image.new("RGB", (64, 64), (10, 200, 30)), "What color is bar 3?"
    strategies = default_strategies((2, 4))
    standalone, escalate = compose_latencies(pipe.run_many(image, question, strategies), tokens)
    for sid in strategies:
        assert standalone[sid] == trace_ms(pipe.run(image, question, sid).trace, tokens), sid
    first = pipe.run(image, question, "large_direct")
    for k in (2, 4, None):
        two_stage = pipe.escalate(first, k).trace[len(first.trace):]
        assert escalate["all" if k is None else k] == trace_ms(two_stage, tokens), k


def test_config_errors_name_the_setting():
    from routedvlm.data.labelling.config import LabelConfig

    base = dict(small="s", large="l", dataset="d", out="o.parquet")
    with pytest.raises(ConfigError, match=r"^The `shard` setting must be 'I/N' with 0 <= I < N"):
        LabelConfig(**base, shard="2/2")
    with pytest.raises(ConfigError, match=r"^The `selector` setting must be one of 'attention', 'prefix' or 'suffix'"):
        LabelConfig(**base, selector="middle")
    with pytest.raises(ConfigError, match=r"^The `k_grid` setting \[2, 4\] does not match"):
        LabelConfig(**base, k_grid="2,4", strategies="transfer_8")
    cfg = LabelConfig(**base, strategies="large_direct,transfer_8,transfer_2")
    assert cfg.k_grid == (2, 8) and cfg.strategies == ("large_direct", "transfer_8", "transfer_2")


def test_engine_sides_without_vllm_are_refused_up_front_and_nothing_is_written(world, tmp_path, monkeypatch, capsys):
    """Regression: `--small vllm:... --large vllm:...` without vLLM installed loaded the sides and failed inside every
    sample (an `error` row each); the spec table now refuses the spec when the settings are parsed, naming the install
    step, before any model loads or any file is written."""
    from routedvlm.cli import main

    monkeypatch.setitem(sys.modules, "vllm", None)  # vLLM not installed (as in the normal suite's environment)
    out = tmp_path / "run" / "labels.parquet"
    argv = ["label", "--small", f"vllm:{world.small}", "--large", f"vllm:{world.large}", "--dataset", str(world.data),
            "--out", str(out), "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: The `small` model 'vllm:{world.small}' is an in-process vLLM engine")
    assert "needs vllm: not installed in this environment. Install it (`make vllm-env`" in err
    assert not out.parent.exists()
    with pytest.raises(ConfigError, match=r"^The `large` reasoner 'vllm:r' is an in-process vLLM engine"):
        from routedvlm.data.labelling.config import LabelConfig

        LabelConfig(small=world.small, large=world.large, large_reasoner="vllm:r", dataset="d", out="o.parquet")


def test_help_is_fast_and_imports_no_torch():
    code = ("import sys\nfrom routedvlm.cli import main\ntry:\n    main(['label', '--help'])\n"
            "except SystemExit:\n    pass\nprint('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "routedvlm label merge" in out.stdout and out.stdout.strip().endswith("False")


@pytest.mark.slow
def test_merge_refuses_files_of_different_runs(full_run, tmp_path):
    from routedvlm.data.labels.schema import read_labels, write_labels

    df, meta = read_labels(full_run)
    other = write_labels(df, tmp_path / "other.parquet", {**meta, "selector": "suffix"})
    with pytest.raises(LabelsError, match=r"^These labels files come from different runs .*'selector' differs"):
        _label("merge", str(tmp_path / "m.parquet"), str(full_run), str(other))


@pytest.mark.slow
def test_a_run_where_every_sample_failed_exits_1(world, tmp_path, capsys):
    broken = tmp_path / "broken.parquet"
    pd.DataFrame([{"sample_id": f"b{i}", "question": "q?", "answer": ["a"], "image": b"not an image"}
                  for i in range(2)]).to_parquet(broken)
    out = tmp_path / "labels.parquet"
    args = _args(world, out)
    args[args.index("--dataset") + 1] = str(broken)
    assert _label(*args) == 1
    err = capsys.readouterr().err
    assert "error: every sample failed (2 of 2)" in err and out.is_file()  # the errors stay inspectable
