"""gpu-check on the CPU with tiny shapes: exit status, JSON after every step, the budget, the dry-run counts."""
from __future__ import annotations

import json

import pytest

from shape_helpers import write_tiny_shape

TINY_GRID = ["--image-sizes", "64", "--prompt-tokens", "4,8", "--output-tokens", "1,5", "--repeats", "1",
             "--no-warmup", "--no-progress"]
SMALL_ESCALATION = {"keep_tokens": 4, "answer_tokens": 3, "repeats": 1}


def _settings():
    from routedvlm.inference.profiling.profiler import ProfileSettings

    return ProfileSettings(image_sizes=[64], prompt_tokens=[4, 8], output_tokens=[1, 5], repeats=1, device="cpu",
                           dtype="float32", warmup=False)


def _run(tmp_path, monkeypatch, **kw):
    from routedvlm.inference.profiling.gpu_check import run_gpu_check

    monkeypatch.chdir(tmp_path)  # no tests/ folder here: the tests step is skipped, with its reason
    shapes = [str(write_tiny_shape(tmp_path / "small.json", vocab_size=512, hidden=32)),
              str(write_tiny_shape(tmp_path / "large.json", vocab_size=512, hidden=64))]
    lines = []
    out = tmp_path / "gc" / "gpu-check.json"
    result, code = run_gpu_check(_settings(), shapes, out, tmp_path / "gc", kw.pop("escalation", SMALL_ESCALATION),
                                 show_progress=False, memory_margin_gib=0.0, on_step=lines.append, **kw)
    return result, code, out, lines


def test_a_failing_later_step_sets_the_exit_status_and_keeps_what_was_measured(tmp_path, monkeypatch):
    from routedvlm.inference.profiling import gpu_check

    def broken_plots(result, folder):
        raise RuntimeError("plotting broke")

    monkeypatch.setattr(gpu_check, "_plots", broken_plots)
    result, code, out, lines = _run(tmp_path, monkeypatch)
    assert code == 1
    saved = json.loads(out.read_text())
    status = {s["step"]: s["status"] for s in saved["steps"]}
    assert status == {"memory check": "ok", "build small": "ok", "profile small": "ok", "escalation small": "ok",
                      "build large": "ok", "profile large": "ok", "escalation large": "ok", "gpu tests": "skipped",
                      "plots": "error"}
    assert saved["steps"][-1]["error"] == "RuntimeError: plotting broke"
    assert list(saved["models"]) == ["small", "large"] and set(saved["escalation"]) == {"small", "large"}
    assert saved["crossovers"] and saved["escalation"]["large"]["same_tokens"]  # float32: reuse == cold
    assert saved["escalation"]["large"]["first_logits_max_rel_diff"] == 0.0  # -inf (masked EOS) entries are no NaN
    assert [rec["step"] for rec in lines] == list(status)  # one report per step, as it ends


def test_a_crash_leaves_the_json_of_the_steps_before_it(tmp_path, monkeypatch):
    from routedvlm.inference.profiling import gpu_check

    def crash(*args, **kwargs):
        raise KeyboardInterrupt  # not an Exception: the run stops here, as a killed process would

    monkeypatch.setattr(gpu_check, "_tests", crash)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, monkeypatch)
    saved = json.loads((tmp_path / "gc" / "gpu-check.json").read_text())
    assert [s["step"] for s in saved["steps"]][-1] == "escalation large"
    assert list(saved["models"]) == ["small", "large"] and saved["models"]["large"]["measurements"]["decode"]


def test_escalation_disagreement_fails_the_run(tmp_path, monkeypatch):
    from routedvlm.inference.profiling import escalation

    real = escalation.report

    def differing(*args, **kwargs):
        return dict(real(*args, **kwargs), same_tokens=False, first_logits_max_rel_diff=0.5)

    monkeypatch.setattr(escalation, "report", differing)
    result, code, out, _ = _run(tmp_path, monkeypatch)
    steps = {s["step"]: s for s in json.loads(out.read_text())["steps"]}
    assert code == 1 and steps["escalation small"]["status"] == "failed"
    assert "reuse and cold second stage disagree on small (float32)" in steps["escalation small"]["reason"]


def test_check_escalation_tolerates_bf16_rounding_only():
    from routedvlm.inference.profiling.gpu_check import BF16_LOGIT_TOL, check_escalation

    e = {"model": "m", "dtype": "bfloat16", "same_tokens": False, "first_logits_max_rel_diff": BF16_LOGIT_TOL / 2}
    assert check_escalation(e) == ("ok", None)
    assert check_escalation(dict(e, first_logits_max_rel_diff=BF16_LOGIT_TOL * 2))[0] == "failed"
    assert check_escalation(dict(e, dtype="float32"))[0] == "failed"  # float32 must be exact
    assert check_escalation(dict(e, dtype="float32", same_tokens=True)) == ("ok", None)


class _ExpiresAfterFirstCall:
    """A budget that runs out at the first check between two calls (no clock involved)."""

    def left(self):
        return None if not getattr(self, "spent", False) else -1.0

    def check(self):
        from routedvlm.inference.profiling.gpu_check import BudgetExceeded

        self.spent = True
        raise BudgetExceeded()


def test_budget_stops_between_calls_with_partial_json_and_exit_2(tmp_path, monkeypatch):
    result, code, out, _ = _run(tmp_path, monkeypatch, budget_s=_as_budget(_ExpiresAfterFirstCall()))
    saved = json.loads(out.read_text())
    status = [(s["step"], s["status"]) for s in saved["steps"]]
    assert code == 2
    assert status[:3] == [("memory check", "ok"), ("build small", "ok"), ("profile small", "budget")]
    assert all(st == "budget" for _, st in status[3:]) and saved["models"] == {}


def _as_budget(fake):
    from routedvlm.inference.profiling.gpu_check import Budget

    b = Budget(None)
    b.left, b.check = fake.left, fake.check
    return b


def test_dry_run_counts_the_calls_of_each_step(tmp_path, monkeypatch, capsys):
    """Hand count at the tiny grid: 2 profile calls generating 5 tokens (1 prefill + 4 decode forwards each);
    escalation: the cached prefix (1 prefill), then (repeats + 1) rounds of reuse (1 prefill + 15 decode) and cold
    (vision + 1 prefill + 15 decode) with the preset's 16 answer tokens and 5 repeats."""
    from routedvlm.inference.profiling.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["--preset", "gpu-check", "--dry-run", "--shape", "qwen3-vl-2b", *TINY_GRID]) == 0
    saved = json.loads((tmp_path / "runs" / "gpu-check" / "dry-run.json").read_text())
    steps = {s["step"]: s for s in saved["steps"]}
    assert saved["dry_run"] and saved["settings"]["device"] == "cpu"
    assert steps["build qwen3-vl-2b"]["counts"] == {"meta_builds": 1}
    assert steps["memory check"]["counts"] == {"meta_builds": 1}
    prof = steps["profile qwen3-vl-2b"]["counts"]
    assert (prof["vision_calls"], prof["prefill_forwards"], prof["decode_forwards"]) == (2, 2, 8)
    esc = steps["escalation qwen3-vl-2b"]["counts"]
    rounds = 5 + 1
    assert (esc["prefill_forwards"], esc["decode_forwards"], esc["vision_calls"]) == (1 + 2 * rounds, 2 * rounds * 15,
                                                                                      1 + rounds)
    est = saved["expected_gpu_seconds"]
    assert est["total"] == pytest.approx(sum(v for k, v in est.items() if k != "total"), abs=0.2)
    assert est["profile qwen3-vl-2b"] > 0
    out = capsys.readouterr().out
    assert "[gpu-check] profile qwen3-vl-2b" in out and "decode_forwards 8" in out and "dry run: expected" in out


def test_gpu_tests_run_on_the_chosen_device_and_count(tmp_path):
    from routedvlm.inference.profiling.gpu_check import gpu_tests

    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_dev.py").write_text(
        "import os, pytest\n\n@pytest.mark.gpu\ndef test_a():\n    assert os.environ['ROUTEDVLM_TEST_DEVICE'] == 'cuda:1'\n\n"
        "@pytest.mark.gpu\ndef test_b():\n    pass\n\ndef test_c():\n    pass\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: needs a GPU\n")
    res = gpu_tests("cuda:1", tmp_path)
    assert res["status"] == "passed" and res["device"] == "cuda:1" and "2 passed" in res["summary"]
    assert gpu_tests("cuda:2", tmp_path)["status"] == "failed"  # the device reaches the tests
    assert gpu_tests("cpu", tmp_path, collect_only=True)["tests"] == 2
    assert gpu_tests("cpu", tmp_path)["status"] == "skipped"


def test_lean_generate_gives_the_same_tokens_without_logprobs(tmp_path):
    from routedvlm.inference.sides.local.generation import lean, timed_generate
    from routedvlm.inference.profiling.inputs import random_image
    from routedvlm.inference.profiling.shapes import shape_vlm

    vlm = shape_vlm(write_tiny_shape(tmp_path / "t.json", vocab_size=512, hidden=32), "cpu", "float32")
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Count the bars."}]}]
    inputs = vlm.encode(random_image(64), vlm.render(messages, "direct"))
    full = timed_generate(vlm.model, inputs, max_new_tokens=4, min_new_tokens=4)
    with lean(per_step_sync=False):
        fast = timed_generate(vlm.model, inputs, max_new_tokens=4, min_new_tokens=4)
    assert fast.token_ids == full.token_ids and len(full.token_logprobs) == 4 and fast.token_logprobs == []
    assert fast.first_logits is not None and bool((fast.first_logits == full.first_logits).all())
    assert len(fast.token_times_ms) == 4


def test_budget_and_dry_run_need_the_preset(tmp_path):
    from routedvlm.errors import ConfigError
    from routedvlm.inference.profiling.cli import main

    with pytest.raises(ConfigError, match=r"^The `--dry-run` and `--budget-s` flags belong to a preset run"):
        main(["--shape", "qwen3-vl-2b", "--dry-run", "--out", str(tmp_path / "p.json")])
    with pytest.raises(ConfigError, match=r"^The `--budget-s` flag must be a positive number of seconds"):
        main(["--preset", "gpu-check", "--budget-s", "0"])


def test_expected_seconds_worked_example():
    """8B profile step: 100 decode forwards x 25 ms + 1,000 prefill tokens x 0.06 ms + 2 calls x 15 ms = 2.59 s;
    a build: 12 s + one 2 s meta build; the tests: 30 s + 2 x 20 s."""
    from routedvlm.inference.profiling.dry_run import estimate_seconds

    steps = [{"step": "profile", "kind": "profile", "shape": "qwen3-vl-8b",
              "counts": {"decode_forwards": 100, "prefill_tokens": 1000, "prefill_forwards": 2, "vision_patches": 0}},
             {"step": "build", "kind": "build", "shape": "qwen3-vl-8b", "counts": {"meta_builds": 1}},
             {"step": "tests", "kind": "tests", "counts": {"tests": 2}}]
    assert estimate_seconds(steps) == {"profile": 2.6, "build": 14.0, "tests": 70.0, "total": 86.6}


def test_dry_run_refuses_shapes_it_cannot_shrink():
    from routedvlm.errors import ConfigError
    from routedvlm.inference.profiling.dry_run import tiny_config

    with pytest.raises(ConfigError, match=r"^The dry run builds tiny Qwen3-VL stand-ins; .* Got 'qwen2_vl' instead\."):
        tiny_config({"model_type": "qwen2_vl"})
