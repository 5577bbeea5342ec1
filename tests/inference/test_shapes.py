"""Model shapes with random weights: published parameter counts, target dtype without float32 copies, memory refusal."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from routedvlm.errors import ConfigError, InsufficientMemoryError

from shape_helpers import tiny_shape_config, write_tiny_shape

# Parameter counts the Hugging Face hub reports for the published checkpoints (2B: hub API; 8B: safetensors bytes / 2).
PUBLISHED = {"qwen3-vl-2b": 2_127_532_032, "qwen3-vl-4b": 4_437_815_808, "qwen3-vl-8b": 8_767_123_696}


@pytest.fixture(scope="module")
def tokenizer():
    from routedvlm.inference.tiny import build_tokenizer

    return build_tokenizer()


def test_shipped_shapes_have_the_published_parameter_counts(tokenizer):
    from routedvlm.inference.profiling.shape_memory import estimate_memory
    from routedvlm.inference.profiling.shapes import meta_model, resolve_shape, shape_names

    assert shape_names() == sorted(PUBLISHED)
    for name, count in PUBLISHED.items():
        _, config, _ = resolve_shape(name)
        model = meta_model(config, "bfloat16", tokenizer)  # meta device: no memory
        est = estimate_memory(model)
        assert est["parameters"] == count, name
        assert est["weights_gib"] == pytest.approx(count * 2 / 2**30, abs=1e-3)
        tied = model.lm_head.weight is model.model.language_model.embed_tokens.weight
        assert tied == config["tie_word_embeddings"], name
        assert all(p.is_meta for p in model.parameters())


def test_small_config_builds_like_from_config_in_bfloat16_without_a_float32_copy(tmp_path):
    """Same parameter count as transformers' own construction; every weight bf16; no big float32 tensor created."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from transformers import AutoModelForImageTextToText

    from routedvlm.inference.profiling.shapes import _BLOCK, _hf_config, shape_vlm
    from routedvlm.inference.tiny import build_tokenizer

    path = write_tiny_shape(tmp_path / "tiny.json")  # published vocabulary: the embedding alone has 9.7M elements

    class Allocations(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.float32 = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else [out]:
                if isinstance(t, torch.Tensor) and not t.is_meta and t.dtype == torch.float32:
                    self.float32.append(t.numel())
            return out

    with Allocations() as allocs:
        vlm = shape_vlm(path, "cpu", "bfloat16", seed=0)
    reference = AutoModelForImageTextToText.from_config(_hf_config(tiny_shape_config(), build_tokenizer()))
    params = list(vlm.model.parameters())
    assert sum(p.numel() for p in params) == sum(p.numel() for p in reference.parameters()) > 9_000_000
    assert {p.dtype for p in params} == {torch.bfloat16} and {p.device.type for p in params} == {"cpu"}
    assert vlm.model.lm_head.weight is vlm.model.model.language_model.embed_tokens.weight
    assert max(allocs.float32) <= _BLOCK, "a float32 tensor larger than the seeded block was materialised"
    buffers = dict(vlm.model.named_buffers())
    assert all(not b.is_meta for b in buffers.values())
    assert torch.equal(buffers["model.language_model.rotary_emb.inv_freq"],
                       dict(reference.named_buffers())["model.language_model.rotary_emb.inv_freq"])


@pytest.mark.slow
def test_peak_memory_is_the_bfloat16_weights_not_a_float32_copy(tmp_path):
    """In a fresh process: building ~150M parameters in bf16 raises peak RSS by about their bf16 size only."""
    path = write_tiny_shape(tmp_path / "mid.json", hidden=384, tie=False)  # 2 x 151936 x 384 embedding + head
    code = (
        "import resource, sys, torch\n"
        "from routedvlm.inference.profiling.shapes import shape_vlm\n"
        "import transformers, accelerate\n"
        "from transformers import AutoModelForImageTextToText\n"
        "rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024\n"
        "before = rss()\n"
        f"vlm = shape_vlm({str(path)!r}, 'cpu', 'bfloat16')\n"
        "weights = sum(p.numel() * p.element_size() for p in vlm.model.parameters())\n"
        "print(weights, rss() - before)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    weights, growth = (int(v) for v in res.stdout.split()[-2:])
    assert weights > 200 * 2**20
    assert growth < 1.4 * weights + 100 * 2**20, (weights, growth)  # a float32 copy would add 2x the weights


def test_weights_are_seeded_and_follow_the_init_rules(tmp_path):
    import torch

    from routedvlm.inference.profiling.shapes import shape_vlm

    path = write_tiny_shape(tmp_path / "tiny.json", vocab_size=512)
    a, b, c = (shape_vlm(path, "cpu", "bfloat16", seed=s).model for s in (0, 0, 1))
    pa, pb, pc = (dict(m.named_parameters()) for m in (a, b, c))
    assert all(torch.equal(pa[k], pb[k]) for k in pa)
    key = "model.language_model.layers.0.mlp.up_proj.weight"
    assert not torch.equal(pa[key], pc[key])
    assert float(pa[key].float().std()) == pytest.approx(0.02, rel=0.05)
    assert torch.all(pa["model.language_model.norm.weight"] == 1)
    assert torch.all(pa["model.visual.blocks.0.attn.qkv.bias"] == 0)
    first = pa["model.language_model.layers.0.self_attn.q_proj.weight"]
    assert not torch.equal(first[0], first[1])  # rows do not repeat


def test_memory_check_refuses_before_allocating(monkeypatch):
    from routedvlm.inference.profiling import shape_memory
    from routedvlm.inference.profiling.shapes import shape_vlm

    monkeypatch.setattr(shape_memory, "available_gib", lambda device: (4.0, "a test"))
    with pytest.raises(InsufficientMemoryError, match=r"^The shape 'qwen3-vl-8b' needs about 1[0-9]\.\d GiB on cpu "
                                                     r"\(16\.3 GiB weights, .* but only 4\.0 GiB is free \(a test\)"):
        shape_vlm("qwen3-vl-8b", "cpu")
    assert issubclass(InsufficientMemoryError, MemoryError)


def test_memory_estimate_grows_with_the_grid(tokenizer):
    from routedvlm.inference.profiling.profiler import ProfileSettings
    from routedvlm.inference.profiling.shape_memory import check_fits, estimate_memory, image_tokens
    from routedvlm.inference.profiling.shapes import meta_model, resolve_shape

    model = meta_model(resolve_shape("qwen3-vl-2b")[1], "bfloat16", tokenizer)
    assert image_tokens(model.config, 224, 224) == (256, 64)  # upscaled to the 256^2-pixel minimum
    assert image_tokens(model.config, 448, 448) == (784, 196)
    small = estimate_memory(model, ProfileSettings(image_sizes=[224], prompt_tokens=[8], output_tokens=[1, 4]))
    big = estimate_memory(model, ProfileSettings(image_sizes=[896], prompt_tokens=[1024], output_tokens=[1, 1024]))
    assert small["max_context"] == 64 + 8 + 64 + 4 and big["max_context"] == 784 + 1024 + 64 + 1024
    assert small["weights_gib"] == big["weights_gib"] and big["total_gib"] > small["total_gib"]
    check_fits("qwen3-vl-2b", small, "cpu", available=(small["total_gib"] + 0.1, "a test"))
    with pytest.raises(InsufficientMemoryError, match=r"0\.5 GiB margin"):
        check_fits("qwen3-vl-2b", small, "cpu", margin_gib=0.5, available=(small["total_gib"] + 0.1, "a test"))


def test_memory_estimate_worked_example_on_the_meta_device(tokenizer):
    """Hand count for the tiny shape in bf16 (2 bytes): an 896 px image = 56 x 56 = 3136 patches of 16 px, 784 LM
    tokens after the 2x2 merge; context 784 + 1024 prompt + 64 template + 4 output = 1876 tokens. Attention scores
    are held twice: the product in bf16 (2 bytes) and its float32 softmax (4 bytes)."""
    from routedvlm.inference.profiling.profiler import ProfileSettings
    from routedvlm.inference.profiling.shape_memory import GIB, estimate_memory
    from routedvlm.inference.profiling.shapes import meta_model

    model = meta_model(tiny_shape_config(), "bfloat16", tokenizer)  # text: hidden 64, 4 heads (2 KV) of 16, 2 layers
    assert all(p.is_meta for p in model.parameters())
    est = estimate_memory(model, ProfileSettings(image_sizes=[896], prompt_tokens=[1024], output_tokens=[1, 4]))
    assert est["max_context"] == 1876
    text = 1876 * (4 * 64 + 3 * 128) * 2 + 4 * 1876 * 1876 * (2 + 4) + 4 * 151936  # activations, scores, logits
    vision = 3136 * (4 * 32 + 2 * 64) * 2 + 2 * 3136 * 3136 * (2 + 4)  # 2 heads over 3136 patches
    assert vision > text and est["activations_gib"] == round(vision / GIB, 3) == 0.111
    # the old count (scores in bf16 only) was a third of this: 0.038 GiB


def test_resolve_shape_errors_name_the_options(tmp_path):
    from routedvlm.inference.profiling.shapes import is_shape_spec, resolve_shape

    with pytest.raises(ConfigError, match=r"^The `--shape` value must be one of 'qwen3-vl-2b', 'qwen3-vl-4b' or "
                                          r"'qwen3-vl-8b' or a config.json file. Got 'qwen3-vl-3b' instead"):
        resolve_shape("qwen3-vl-3b")
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ConfigError, match=r"must have a `model_type` of 'qwen2_5_vl', 'qwen2_vl' or 'qwen3_vl'"):
        resolve_shape(bad)
    (tmp_path / "x").mkdir()
    good = write_tiny_shape(tmp_path / "x" / "config.json")
    assert resolve_shape(good)[0] == "x" and is_shape_spec(good) and is_shape_spec("qwen3-vl-2b")
    assert not is_shape_spec(tmp_path)


def test_shape_vlm_generates_on_an_image(tmp_path):
    from routedvlm.inference.profiling.profiler import _one_call, random_image
    from routedvlm.inference.profiling.shapes import shape_vlm

    vlm = shape_vlm(write_tiny_shape(tmp_path / "tiny.json", vocab_size=512), "cpu")
    call = _one_call(vlm, random_image(224), "How tall is the bar?", 4, "cpu")
    assert call["image_tokens"] == 64 and len(call["gen"].token_ids) == 4
    assert vlm.style == "hybrid" and vlm.shape_info["memory_estimate"]["parameters"] > 0


@pytest.mark.slow
def test_cli_profiles_shapes_with_memory_and_time(tmp_path, capsys):
    from routedvlm.cli import main

    small = write_tiny_shape(tmp_path / "small.json", vocab_size=512, hidden=32)
    large = write_tiny_shape(tmp_path / "large.json", vocab_size=512, hidden=64)
    out = tmp_path / "profile.json"
    assert main(["profile", "--shape", str(small), "--shape", str(large), "--image-sizes", "64", "--prompt-tokens",
                 "4,12", "--output-tokens", "1,3", "--repeats", "1", "--no-warmup", "--out", str(out),
                 "--no-progress"]) == 0
    prof = json.loads(out.read_text())
    assert list(prof["models"]) == ["small", "large"] and prof["settings"]["warmup"] is False
    for entry in prof["models"].values():
        assert entry["shape"]["source"] == entry["path"] and entry["shape"]["seed"] == 0
        assert entry["dtype"] == "bfloat16" and entry["peak_rss_gib"] > 0 and entry["seconds"] >= entry["load_seconds"]
        assert len(entry["measurements"]["prefill"]) == 2
    assert [c["m"] for c in prof["crossovers"]] == [3]
    assert "process peak RSS" in capsys.readouterr().out
    assert not (tmp_path / "profile.partial.json").exists()  # written after each model, removed at the end


def test_every_shape_is_checked_before_the_first_measurement(tmp_path, monkeypatch):
    from routedvlm.inference.profiling import shape_memory
    from routedvlm.inference.profiling.profiler import ProfileSettings, run_profile

    monkeypatch.setattr(shape_memory, "available_gib", lambda device: (4.0, "a test"))
    tiny = write_tiny_shape(tmp_path / "tiny.json", vocab_size=512)
    settings = ProfileSettings(image_sizes=[64], prompt_tokens=[4], output_tokens=[1, 3], repeats=1, warmup=False)
    with pytest.raises(InsufficientMemoryError, match=r"^The shape 'qwen3-vl-8b' needs about"):
        run_profile([], settings, show_progress=False, shapes=[str(tiny), "qwen3-vl-8b"],
                    partial_path=tmp_path / "partial.json")
    assert not (tmp_path / "partial.json").exists()  # refused before the tiny shape was measured


def test_partial_profile_is_written_after_each_model(tmp_path):
    from routedvlm.inference.profiling.profiler import ProfileSettings, run_profile

    tiny = write_tiny_shape(tmp_path / "tiny.json", vocab_size=512)
    settings = ProfileSettings(image_sizes=[64], prompt_tokens=[4, 8], output_tokens=[1, 3], repeats=1,
                               warmup=False, clock="cpu")
    prof = run_profile([], settings, show_progress=False, shapes=[str(tiny)], partial_path=tmp_path / "p.json")
    partial = json.loads((tmp_path / "p.json").read_text())
    assert list(partial["models"]) == ["tiny"] and partial["crossovers"] == []
    assert partial["settings"]["clock"] == "cpu" and prof["models"]["tiny"]["fit"] == partial["models"]["tiny"]["fit"]


def test_cpu_clock_is_for_cpu_devices_only():
    from routedvlm.inference.profiling.profiler import ProfileSettings

    with pytest.raises(ConfigError, match=r"^The `clock` setting must be one of 'cpu' or 'wall'\. Got 'gpu'"):
        ProfileSettings(clock="gpu")
    with pytest.raises(ConfigError, match=r"^The `clock` setting 'cpu' measures CPU seconds and cannot time a 'cuda'"):
        ProfileSettings(clock="cpu", device="cuda")


def test_clock_swaps_the_time_stamps_of_generation():
    import time

    from routedvlm.inference.sides.local import generation

    assert generation.now.__module__ == generation.__name__
    with generation.clock(lambda: 42.0):
        assert generation.now() == 42.0
    assert abs(generation.now() - time.perf_counter()) < 1.0


def test_cli_needs_a_model_or_a_shape(tmp_path):
    from routedvlm.inference.profiling.cli import main

    with pytest.raises(ConfigError, match=r"^routedvlm profile needs at least one --model PATH_OR_ID or --shape"):
        main(["--out", str(tmp_path / "p.json")])


def test_gpu_check_preset_sets_the_paper_grid_on_cuda(tmp_path, tokenizer):
    from routedvlm.inference.profiling.gpu_check import PRESETS
    from routedvlm.inference.profiling.cli import build_parser, resolve_args
    from routedvlm.inference.profiling.profiler import ProfileSettings
    from routedvlm.inference.profiling.shape_memory import estimate_memory
    from routedvlm.inference.profiling.shapes import meta_model, resolve_shape

    args = build_parser().parse_args(["--preset", "gpu-check"])
    preset, shapes = resolve_args(args)
    assert shapes == ["qwen3-vl-2b", "qwen3-vl-8b"] and (args.device, args.dtype) == ("cuda", "bfloat16")
    assert args.image_sizes == [224, 448, 896] and args.prompt_tokens == [32, 256, 1024]
    assert max(args.output_tokens) == 512 and str(args.out) == "runs/gpu-check/gpu-check.json"
    args = build_parser().parse_args(["--preset", "gpu-check", "--device", "cpu", "--repeats", "1"])
    resolve_args(args)
    assert (args.device, args.repeats, args.image_sizes) == ("cpu", 1, [224, 448, 896])  # flags override the preset
    p = PRESETS["gpu-check"]
    settings = ProfileSettings(image_sizes=p["image_sizes"], prompt_tokens=p["prompt_tokens"],
                               output_tokens=p["output_tokens"], repeats=p["repeats"])
    est = estimate_memory(meta_model(resolve_shape("qwen3-vl-8b")[1], "bfloat16", tokenizer), settings)
    assert est["total_gib"] < 24  # fits an 80 GB card with room; an H200 has 141 GB
    with pytest.raises(ConfigError, match=r"^The `--model` flag cannot be combined with --preset"):
        resolve_args(build_parser().parse_args(["--preset", "gpu-check", "--model", "x"]))


def test_gpu_check_without_cuda_is_a_clear_error(tmp_path):
    import torch

    from routedvlm.inference.profiling.cli import main

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ConfigError, match=r"^The `device` setting is 'cuda' but this torch has no CUDA device"):
        main(["--preset", "gpu-check", "--out", str(tmp_path / "gc.json"), "--no-progress"])
    assert not (tmp_path / "gc.json").exists()


@pytest.mark.slow
def test_gpu_check_dry_path_on_cpu_with_tiny_shapes(tmp_path, capsys):
    """The preset's whole path (profile, escalation, tests step, one JSON + plots) on CPU with tiny shapes."""
    from routedvlm.inference.profiling.latency_model import LatencyModel
    from routedvlm.cli import main

    small = write_tiny_shape(tmp_path / "small.json", vocab_size=512, hidden=32)
    large = write_tiny_shape(tmp_path / "large.json", vocab_size=512, hidden=64)
    out = tmp_path / "gc" / "gpu-check.json"
    assert main(["profile", "--preset", "gpu-check", "--device", "cpu", "--dtype", "float32", "--shape", str(small),
                 "--shape", str(large), "--image-sizes", "64", "--prompt-tokens", "4,12", "--output-tokens", "1,3",
                 "--repeats", "1", "--no-warmup", "--out", str(out), "--plots-dir", str(tmp_path / "gc"),
                 "--no-progress"]) == 0
    result = json.loads(out.read_text())
    assert result["preset"] == "gpu-check" and list(result["models"]) == ["small", "large"]
    assert [s["step"] for s in result["steps"]] == ["memory check", "build small", "profile small", "escalation small",
                                                    "build large", "profile large", "escalation large", "gpu tests",
                                                    "plots"]
    assert result["gpu_tests"]["status"] == "skipped" and "not a CUDA device" in result["gpu_tests"]["reason"]
    for name, esc in result["escalation"].items():
        assert esc["same_tokens"], name  # float32: reuse and cold give the same tokens
        assert esc["reuse_prefill_tokens"] == esc["cold_prefill_tokens"] - esc["cached_prefix_tokens"]
        assert esc["keep_tokens"] == 64 and esc["answer_tokens"] == 16
    assert LatencyModel.load(out, "large").stage_ms({"vision_ms": 1, "prefill_tokens": 9, "decode_tokens": 3}) > 0
    for png in ("components.png", "crossover.png"):
        assert (tmp_path / "gc" / png).read_bytes()[:4] == b"\x89PNG"
    text = capsys.readouterr().out
    assert "escalation large: reuse" in text and "gpu tests: skipped" in text and "all steps ok" in text
    assert "[gpu-check] profile large" in text


@pytest.mark.gpu
def test_shape_builds_and_generates_on_cuda(tmp_path, gpu_device):
    """On a GPU (`make test-gpu`): a shape is allocated on CUDA in bf16 and generates with synchronised timings."""
    import torch

    from routedvlm.inference.profiling.profiler import _one_call, random_image
    from routedvlm.inference.profiling.shapes import shape_vlm

    vlm = shape_vlm(write_tiny_shape(tmp_path / "tiny.json"), gpu_device, "bfloat16")
    assert {p.device.type for p in vlm.model.parameters()} == {"cuda"}
    assert {p.dtype for p in vlm.model.parameters()} == {torch.bfloat16}
    call = _one_call(vlm, random_image(448), "How tall is the bar?", 4, gpu_device)
    assert call["image_tokens"] == 196 and len(call["gen"].token_ids) == 4 and call["gen"].prefill_ms > 0


def test_from_reanalyses_a_saved_profile_at_other_m(tmp_path, capsys):
    from test_profiler import synthetic_profile

    from routedvlm.inference.profiling.crossover import crossover_points
    from routedvlm.inference.profiling.cli import main

    saved = tmp_path / "profile.json"
    saved.write_text(json.dumps(synthetic_profile()))
    before = saved.read_text()
    out = tmp_path / "again.json"
    assert main(["--from", str(saved), "--crossover-m", "16,256", "--out", str(out), "--plots-dir", str(tmp_path)]) == 0
    assert saved.read_text() == before
    again = json.loads(out.read_text())
    assert [c["m"] for c in again["crossovers"]] == [16, 256]
    assert again["crossovers"] == crossover_points(synthetic_profile(), [16, 256])
    assert "producing 256" in capsys.readouterr().out and (tmp_path / "crossover.png").exists()
    with pytest.raises(ConfigError, match=r"^The `--from` flag re-analyses a saved profile"):
        main(["--from", str(saved), "--shape", "qwen3-vl-2b"])


def test_the_shipped_cpu_profile_reports_its_crossovers():
    """docs/profile_qwen3vl_2b_4b_cpu.json (README numbers): the 4B wins only once the 2B reasons past ~120 tokens."""
    import pathlib

    from routedvlm.inference.profiling.crossover import crossover_points
    from routedvlm.inference.profiling.latency_model import read_profile

    path = pathlib.Path(__file__).resolve().parents[2] / "docs" / "profile_qwen3vl_2b_4b_cpu.json"
    prof = read_profile(path)
    assert prof["settings"]["clock"] == "cpu" and prof["settings"]["dtype"] == "bfloat16"
    assert {n: e["parameters"] for n, e in prof["models"].items()} == {k: PUBLISHED[k] for k in ("qwen3-vl-2b",
                                                                                               "qwen3-vl-4b")}
    points = {c["m"]: c["large_tokens"] for c in crossover_points(prof, [16, 64, 256, 1024])}
    assert points[16] is None and points[64] is None and 0 < points[256] < points[1024] < 1024
