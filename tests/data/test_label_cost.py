"""`routedvlm label --cost profile.json`: latencies from the fitted latency model are deterministic and labelled so."""
from __future__ import annotations

import json

import pytest

from routedvlm.inference.profiling.latency_model import profile_hash


def _fit(intercept, slope, x):
    return {"x": x, "intercept": intercept, "slope": slope, "r2": 1.0, "mape": 0.0, "n": 3}


def _profile(small_path, large_path) -> dict:
    """A hand-written profile: the large model costs 4x the small one per component."""
    models = {}
    for name, path, scale, params in (("tiny-small", small_path, 1.0, 1), ("tiny-large", large_path, 4.0, 2)):
        models[name] = {
            "path": str(path), "parameters": params,
            "reference": {"image_size": 64, "prompt_tokens": 16, "image_tokens": 4, "prefill_tokens": 40},
            "fit": {"vision": _fit(2.0 * scale, 0.5 * scale, "image_tokens"),
                    "prefill": _fit(1.0 * scale, 0.1 * scale, "tokens"),
                    "decode": _fit(3.0 * scale, 0.01 * scale, "context_len")},
        }
    return {"format_version": 1, "settings": {"output_tokens": [1, 4]}, "models": models}


@pytest.fixture(scope="module")
def cost_setup(tmp_path_factory):
    from PIL import Image

    from routedvlm.inference.tiny import build_tiny_pair

    root = tmp_path_factory.mktemp("label-cost")
    small, large = build_tiny_pair(root / "models", "qwen3_vl")
    rows = []
    for i, color in enumerate([(200, 10, 10), (10, 200, 10)]):
        Image.new("RGB", (64, 64), color).save(root / f"img{i}.png")
        rows.append({"id": f"s{i}", "question": f"What color is picture {i}?", "answer": "red", "image": f"img{i}.png"})
    data = root / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    profile = root / "profile.json"
    profile.write_text(json.dumps(_profile(small, large)))
    return root, small, large, data, profile


def _label(root, small, large, data, profile, out_name):
    from routedvlm.data.labels.schema import read_labels
    from routedvlm.cli import main

    out = root / out_name
    argv = ["label", "--small", str(small), "--large", str(large), "--dataset", str(data), "--out", str(out),
            "--strategies", "small_direct,large_direct,small_reason,transfer_2", "--max-new-tokens", "3",
            "--max-reason-tokens", "6", "--min-new-tokens", "2", "--min-reason-tokens", "6", "--device", "cpu",
            "--cost", str(profile), "--no-progress"]
    assert main(argv) == 0
    return read_labels(out)


@pytest.mark.slow
def test_two_runs_with_cost_give_identical_latencies(cost_setup):
    import torch

    torch.set_num_threads(1)
    root, small, large, data, profile = cost_setup
    df1, meta1 = _label(root, small, large, data, profile, "a.parquet")
    df2, meta2 = _label(root, small, large, data, profile, "b.parquet")
    cols = [c for c in df1.columns if c.startswith("latency_ms__")]
    assert {"latency_ms__large_direct", "latency_ms__transfer_2", "latency_ms__escalate_2"} <= set(cols)
    assert df1[cols].equals(df2[cols])  # bit-identical, whatever the machine was doing
    assert (df1[cols] > 0).all().all()
    for meta in (meta1, meta2):
        assert meta["latency_source"] == "cost-model"
        assert meta["cost_profile_sha256"] == profile_hash(profile)
        assert meta["cost_models"] == {"small": "tiny-small", "large": "tiny-large"}
    # The large model is priced at 4x: its direct answer costs more than the small model's, token counts equal.
    assert (df1["output_tokens__large_direct"] == df1["output_tokens__small_direct"]).all()
    assert (df1["latency_ms__large_direct"] > 3 * df1["latency_ms__small_direct"]).all()


def test_a_ladder_prices_each_model_with_its_profiled_model(cost_setup):
    """mid found by its path (the large checkpoint) or named with --cost-model mid=NAME; latencies deterministic."""
    from routedvlm.data.labels.schema import read_labels
    from routedvlm.cli import main

    root, small, large, data, profile = cost_setup

    def run(name, *extra):
        out = root / name
        argv = ["label", "--model", str(small), "--model", str(large), "--model", str(large), "--dataset", str(data),
                "--out", str(out), "--strategies", "small_direct,mid_direct,transfer_small_mid_2", "--max-new-tokens",
                "3", "--max-reason-tokens", "6", "--min-new-tokens", "2", "--min-reason-tokens", "6", "--device", "cpu",
                "--cost", str(profile), "--no-progress", *extra]
        assert main(argv) == 0
        return read_labels(out)

    (a, meta), (b, _) = run("ladder-a.parquet"), run("ladder-b.parquet")
    assert meta["cost_models"] == {"small": "tiny-small", "mid": "tiny-large", "large": "tiny-large"}
    cols = [c for c in a.columns if c.startswith("latency_ms__")]
    assert a[cols].equals(b[cols]) and "latency_ms__escalate_small_mid_2" in cols
    cheap, meta = run("ladder-c.parquet", "--cost-model", "mid=tiny-small")
    assert meta["cost_models"]["mid"] == "tiny-small"
    assert (cheap["latency_ms__mid_direct"] < a["latency_ms__mid_direct"]).all()  # priced 4x cheaper per component


def test_estimate_only_prices_one_sample_with_the_profile(cost_setup, capsys):
    from routedvlm.cli import main

    root, small, large, data, profile = cost_setup
    out = root / "estimate.parquet"
    argv = ["label", "--models", f"{small},{small},{large}", "--dataset", str(data), "--out", str(out), "--k-grid", "2",
            "--max-new-tokens", "3", "--max-reason-tokens", "6", "--min-new-tokens", "2", "--min-reason-tokens", "6",
            "--device", "cpu", "--cost", str(profile), "--no-progress", "--estimate-only"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "2 selected sample(s) at 1 in flight" in text and f"priced by {profile}: " in text and not out.exists()
