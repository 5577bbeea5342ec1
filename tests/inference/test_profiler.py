"""Latency profiler: the fit recovers a known cost function, stage pricing, plots, and the CLI on a tiny model."""
from __future__ import annotations

import json
import random

import pytest

from routedvlm.inference.profiling.crossover import crossover_points, crossover_tokens
from routedvlm.inference.profiling.latency_model import (
    LatencyModel,
    decode_sum_ms,
    fit_components,
    fit_linear,
    profile_hash,
)
from routedvlm.errors import ConfigError

# A known synthetic cost function (ms): what the fit must recover.
TRUE = {
    "preprocess": (1.0, 20.0),   # + per megapixel
    "vision": (5.0, 0.25),       # + per image token
    "prefill": (8.0, 0.05),      # + per prompt token
    "decode": (12.0, 0.002),     # + per context token, per generated token
}


def synthetic_measurements(true=TRUE, noise=0.01, seed=0) -> dict:
    rng = random.Random(seed)

    def ms(comp, x):
        a, b = true[comp]
        return (a + b * x) * (1 + rng.uniform(-noise, noise))

    meas = {"preprocess": [], "vision": [], "prefill": [], "decode": [], "end_to_end": []}
    for size, tokens in ((224, 64), (448, 256), (896, 1024)):
        for rep in range(3):
            meas["preprocess"].append({"image_size": size, "megapixels": size * size / 1e6, "repeat": rep,
                                       "ms": ms("preprocess", size * size / 1e6)})
            meas["vision"].append({"image_size": size, "image_tokens": tokens, "repeat": rep, "ms": ms("vision", tokens)})
            for prompt in (32, 256, 1024):
                total = tokens + prompt + 10
                meas["prefill"].append({"image_size": size, "prompt_tokens": prompt, "tokens": total, "repeat": rep,
                                        "ms": ms("prefill", total)})
    for ctx0 in (106, 330, 1098):
        for pos in range(0, 512, 7):
            meas["decode"].append({"context_len": ctx0 + pos, "ms": ms("decode", ctx0 + pos)})
    return meas


def synthetic_profile(scale_large=3.0) -> dict:
    """Two models: 'large' costs `scale_large` x 'small' for vision/prefill/decode intercepts and slopes."""
    models = {}
    for name, scale, params in (("small", 1.0, 2_000_000), ("large", scale_large, 8_000_000)):
        true = {c: (a * scale, b * scale) if c != "preprocess" else (a, b) for c, (a, b) in TRUE.items()}
        meas = synthetic_measurements(true, seed=int(scale * 10))
        for prompt in (32, 256):
            for n in (1, 16, 64):
                e2e = sum(true[c][0] + true[c][1] * x for c, x in (("vision", 64), ("prefill", 64 + prompt + 10)))
                meas["end_to_end"].append({"image_size": 224, "prompt_tokens": prompt, "output_tokens": n, "repeat": 0,
                                           "ms": e2e + (n - 1) * true["decode"][0]})
        models[name] = {"parameters": params, "measurements": meas, "fit": fit_components(meas),
                        "reference": {"image_size": 224, "prompt_tokens": 32, "image_tokens": 64, "prefill_tokens": 106}}
    settings = {"image_sizes": [224, 448], "prompt_tokens": [32, 256], "output_tokens": [1, 16, 64]}
    return {"format_version": 1, "settings": settings, "models": models}


def test_fit_recovers_known_cost_function():
    fits = fit_components(synthetic_measurements())
    assert set(fits) == {"preprocess", "vision", "prefill", "decode"}
    for comp, (a, b) in TRUE.items():
        assert fits[comp]["slope"] == pytest.approx(b, rel=0.05), comp
        assert fits[comp]["intercept"] == pytest.approx(a, rel=0.1, abs=0.5), comp
        assert fits[comp]["r2"] > 0.95 and fits[comp]["mape"] < 2.0, comp


def test_fit_without_noise_is_exact_and_reports_quality():
    fit = fit_linear([1, 2, 3, 4], [3, 5, 7, 9], "tokens")
    assert (fit.intercept, fit.slope, fit.r2, fit.n) == (pytest.approx(1.0), pytest.approx(2.0), pytest.approx(1.0), 4)
    assert fit.mape == pytest.approx(0.0, abs=1e-9)
    one_x = fit_linear([5, 5], [2.0, 4.0], "tokens")  # one distinct x: mean, no slope
    assert (one_x.intercept, one_x.slope, one_x.r2) == (3.0, 0.0, None)


def test_decode_sum_is_the_sum_over_positions():
    fit = fit_linear([0, 100], [10.0, 11.0], "context_len")  # a = 10, b = 0.01
    expected = sum(10.0 + 0.01 * (50 + i) for i in range(7))
    assert decode_sum_ms(fit, 7, 50) == pytest.approx(expected)


def test_stage_ms_worked_example(tmp_path):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(synthetic_profile()))
    lm = LatencyModel.load(path, model="small")
    f = lm.fits
    record = {"stage": "large_direct", "model": "large", "vision_ms": 31.2, "prefill_ms": 9.9, "prefill_tokens": 100,
              "cached_tokens": 20, "decode_ms": 40.0, "decode_tokens": 4, "image_tokens": 64}
    vision = f["vision"].intercept + f["vision"].slope * 64
    prefill = f["prefill"].intercept + f["prefill"].slope * 100 + f["decode"].slope * 20
    decode = sum(f["decode"].intercept + f["decode"].slope * (120 + i) for i in range(3))  # token 1 from prefill
    assert lm.stage_ms(record) == pytest.approx(vision + prefill + decode)
    # An escalation stage: no image encoded, only the new tokens prefilled after the reused prefix.
    esc = dict(record, vision_ms=0.0, image_tokens=0)
    assert lm.stage_ms(esc) == pytest.approx(prefill + decode)
    # Deterministic: measured times do not enter.
    assert lm.stage_ms(dict(record, vision_ms=999.0, decode_ms=1.0)) == lm.stage_ms(record)
    assert lm.stage_ms({"vision_ms": 0, "prefill_tokens": 0, "decode_tokens": 0}) == 0.0


def test_load_errors_name_the_options(tmp_path):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(synthetic_profile()))
    with pytest.raises(ConfigError, match=r"^The `model` parameter of LatencyModel.load must be one of 'large' or 'small'"):
        LatencyModel.load(path, model="medium")
    with pytest.raises(ConfigError, match=r"^The `model` parameter of LatencyModel.load is required"):
        LatencyModel.load(path)
    with pytest.raises(ConfigError, match=r"^The profile file .* does not exist"):
        LatencyModel.load(tmp_path / "missing.json", model="small")
    assert len(profile_hash(path)) == 64


def test_crossover_matches_brute_force():
    prof = synthetic_profile(scale_large=3.0)
    small, large = LatencyModel.load(prof, "small"), LatencyModel.load(prof, "large")
    ref = prof["models"]["small"]["reference"]
    for m in (16, 64, 256, 1024):
        n_star = crossover_tokens(small, large, m, ref, ref)
        budget = small.end_to_end_ms(m, 106, 64)
        brute = max((n for n in range(1, 4 * m) if large.end_to_end_ms(n, 106, 64) <= budget), default=None)
        assert n_star == brute, m
    assert crossover_tokens(small, large, 1, ref, ref) is None  # a 3x slower model never wins at M = 1


def test_plots_are_written(tmp_path):
    from routedvlm.inference.profiling.plots import plot_components, plot_crossover

    prof = synthetic_profile()
    a = plot_components(prof, tmp_path / "components.png")
    b = plot_crossover(prof, tmp_path / "crossover.png")
    for p in (a, b):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    points = crossover_points(prof)
    assert [(p["small"], p["large"], p["m"]) for p in points] == [("small", "large", 16), ("small", "large", 64)]


def test_fit_is_robust_to_one_slow_repeat_and_never_negative():
    x = [10, 10, 10, 20, 20, 20, 30, 30, 30]
    y = [2.0, 2.0, 50.0, 3.0, 3.0, 3.0, 4.0, 4.0, 4.0]  # one outlier at x = 10 (the machine was busy)
    fit = fit_linear(x, y, "tokens")
    assert (fit.intercept, fit.slope) == (pytest.approx(1.0), pytest.approx(0.1))
    falling = fit_linear([1, 2, 3], [3.0, 2.0, 1.0], "tokens")  # noise that slopes down: flat, not negative
    assert falling.slope == 0.0 and falling.intercept == pytest.approx(2.0)


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory):
    from routedvlm.inference.tiny import build_tiny_pair

    return build_tiny_pair(tmp_path_factory.mktemp("profile-models"), "qwen3_vl")


@pytest.mark.slow
def test_cli_on_tiny_models_writes_profile_and_plots(tiny_pair, tmp_path, capsys):
    import torch

    from routedvlm.cli import main

    torch.set_num_threads(1)
    out, plots = tmp_path / "profile.json", tmp_path / "profile_plots"  # the plots' default folder, beside --out
    argv = ["profile", "--model", str(tiny_pair[0]), "--model", str(tiny_pair[1]), "--image-sizes", "32,64",
            "--prompt-tokens", "8,16", "--output-tokens", "1,4", "--repeats", "1", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    prof = json.loads(out.read_text())
    assert prof["format_version"] == 1 and prof["hardware"]["cpu_cores"] >= 1 and prof["versions"]["torch"]
    assert list(prof["models"]) == ["qwen3_vl-small", "qwen3_vl-large"]
    for entry in prof["models"].values():
        meas = entry["measurements"]
        assert {r["image_size"] for r in meas["vision"]} == {32, 64}
        assert len(meas["prefill"]) == 4 and all(r["ms"] > 0 for r in meas["prefill"])
        # Decode runs at the reference image size (32) to the largest output setting: 4 tokens = 3 steps.
        assert [len(r["step_ms"]) for r in meas["decode"]] == [3, 3]
        assert {r["output_tokens"] for r in meas["end_to_end"]} == {1, 4}
        assert set(entry["fit"]) == {"preprocess", "vision", "prefill", "decode"}
        assert entry["reference"]["image_size"] == 32 and entry["reference"]["prefill_tokens"] > 8
        assert entry["end_to_end_mape"] >= 0
        lm = LatencyModel.load(out, model=next(n for n, e in prof["models"].items() if e is entry))
        assert lm.stage_ms({"vision_ms": 1.0, "prefill_tokens": 30, "cached_tokens": 0, "decode_tokens": 4}) > 0
    assert prof["crossovers"] == crossover_points(prof)
    assert [c["m"] for c in prof["crossovers"]] == [4]
    for name in ("components.png", "crossover.png"):
        assert (plots / name).read_bytes()[:4] == b"\x89PNG"
    assert "crossover:" in capsys.readouterr().out


def test_cli_help_is_fast_and_imports_no_torch():
    import subprocess
    import sys

    code = ("import sys; from routedvlm.cli import main\n"
            "try:\n    main(['profile', '--help'])\nexcept SystemExit:\n    pass\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "--output-tokens" in res.stdout and "example:" in res.stdout


def test_cli_rejects_bad_grids(capsys):
    from routedvlm.inference.profiling.cli import main

    with pytest.raises(SystemExit):
        main(["--model", "x", "--image-sizes", "224,-1", "--out", "p.json"])
    assert "--image-sizes must be comma-separated sizes such as 224 or 96x16" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=r"^The `output_tokens` setting needs a value of at least 2"):
        main(["--model", "x", "--output-tokens", "1", "--out", "p.json"])


def test_cuda_device_without_cuda_is_a_clear_error(tmp_path):
    import torch

    from routedvlm.inference.profiling.cli import main

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA; the GPU test below covers it")
    with pytest.raises(ConfigError, match=r"^The `device` setting is 'cuda' but this torch has no CUDA device"):
        main(["--model", "x", "--device", "cuda", "--out", str(tmp_path / "p.json")])


@pytest.mark.gpu
def test_gpu_profile_synchronises(tiny_pair, tmp_path, gpu_device):
    """On a GPU (`make test-gpu`; deselected by default): the CUDA path (synchronised timings, GPU name)."""
    from routedvlm.inference.profiling.cli import main

    out = tmp_path / "profile.json"
    assert main(["--model", str(tiny_pair[0]), "--image-sizes", "32", "--prompt-tokens", "8", "--output-tokens", "1,4",
                 "--repeats", "1", "--device", gpu_device, "--out", str(out), "--no-progress"]) == 0
    prof = json.loads(out.read_text())
    assert prof["hardware"]["gpu"] and prof["settings"]["device"] == gpu_device


def test_cost_stage_fn_maps_sides_and_hashes_the_profile(tmp_path):
    from routedvlm.inference.profiling.latency_model import cost_stage_fn

    path = tmp_path / "profile.json"
    prof = synthetic_profile()
    prof["models"]["small"]["path"], prof["models"]["large"]["path"] = "/ckpt/a-2b", "/ckpt/b-8b"
    path.write_text(json.dumps(prof))
    rec = {"vision_ms": 3.0, "prefill_tokens": 50, "cached_tokens": 0, "decode_tokens": 8}
    fn, meta = cost_stage_fn(path)  # two models: fewer parameters = small
    assert meta == {"latency_source": "cost-model", "cost_profile_sha256": profile_hash(path),
                    "cost_models": {"small": "small", "large": "large"}}
    assert fn("small", rec) == LatencyModel.load(path, "small").stage_ms(rec) < fn("large", rec)
    fn2, meta2 = cost_stage_fn(path, small_path="/ckpt/b-8b", large="small")  # by path, and by name
    assert meta2["cost_models"] == {"small": "large", "large": "small"}
    assert fn2("small", rec) == fn("large", rec)
    with pytest.raises(ConfigError, match=r"^The `model_side` argument must be one of 'large' or 'small'"):
        fn("medium", rec)
    prof["models"]["third"] = prof["models"]["small"]
    path.write_text(json.dumps(prof))
    with pytest.raises(ConfigError, match=r"^Cannot tell which model of the profile prices the small side"):
        cost_stage_fn(path)


def test_end_to_end_mape_is_zero_for_an_exact_fit_and_counts_misses():
    from routedvlm.inference.profiling.profiler import end_to_end_mape

    fit = {"vision": _fit_dict(2.0, 0.5, "image_tokens"), "prefill": _fit_dict(1.0, 0.1, "tokens"),
           "decode": _fit_dict(3.0, 0.01, "context_len")}
    key = {"image_size": 64, "prompt_tokens": 16, "repeat": 0}
    # vision 2 + 0.5*4 = 4; prefill 1 + 0.1*40 = 5; decode of 3 tokens = 2 steps at contexts 40, 41 = 6.81
    meas = {"vision": [{**key, "image_tokens": 4}], "prefill": [{**key, "tokens": 40}],
            "end_to_end": [{**key, "output_tokens": 3, "ms": 15.81}, {**key, "output_tokens": 1, "ms": 18.0}]}
    assert end_to_end_mape(meas, fit) == pytest.approx((0.0 + 50.0) / 2)  # 9 ms predicted for the 18 ms call


def _fit_dict(a, b, x):
    return {"x": x, "intercept": a, "slope": b}


def test_cli_missing_model_is_a_load_error(tmp_path):
    from routedvlm.inference.profiling.cli import main
    from routedvlm.errors import ModelLoadError

    with pytest.raises(ModelLoadError, match=r"^The checkpoint .*nope.* is neither an existing folder nor a hub id"):
        main(["--model", str(tmp_path / "nope"), "--out", str(tmp_path / "p.json"), "--no-progress"])
    assert not (tmp_path / "p.json").exists()


def test_image_sizes_square_or_width_by_height():
    from routedvlm.inference.profiling.cli import build_parser
    from routedvlm.inference.profiling.profiler import ProfileSettings, random_image

    args = build_parser().parse_args(["--model", "m", "--out", "p.json", "--image-sizes", "448,96X16,224"])
    assert args.image_sizes == [448, "96x16", 224]
    settings = ProfileSettings(image_sizes=args.image_sizes, output_tokens=[1, 4])
    assert settings.image_sizes == ["96x16", 224, 448]  # by area
    assert settings.reference == (224, 256)
    assert random_image("96x16").size == (96, 16) and random_image(32).size == (32, 32)
    with pytest.raises(ConfigError, match=r"^The `image_sizes` setting must hold positive pixel sizes"):
        ProfileSettings(image_sizes=["0x16"])
