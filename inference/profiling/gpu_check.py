"""`routedvlm profile --preset gpu-check` (`make gpu-check`): the paper's latency analysis at real sizes on one GPU.

Steps, in order, each recorded with its status, wall time and the device work it did (`dry_run.Counter`): a memory
check of every shape (meta device), then per shape: build it (bf16, seeded random weights), profile it on the paper's
grid (vision, prefill and per-token decode, synchronised), and run the escalation benchmark on the SAME built model
(second stage from the cached prefix vs cold, `escalation.py`; reuse and cold must agree, see `check_escalation`);
then the GPU-marked tests (`pytest -m gpu` on the chosen device) and the plots. The JSON (a profile.json usable as
`--cost`, plus `escalation`, `gpu_tests`, `steps`) is rewritten after every step, so a crash keeps what was measured.
A step that fails, times out or breaks the check makes the exit status 1; a `--budget-s` stop makes it 2 (steps not
started are recorded as skipped). `--dry-run` runs the same call sequence on the CPU with tiny stand-in shapes and
prints the counts and the GPU time they imply (`dry_run.py`; docs/gpu.md).
"""
from __future__ import annotations

import logging
import os
import pathlib
import subprocess
import sys
import time

logger = logging.getLogger(__name__)

PRESETS = {
    "gpu-check": {
        "shapes": ["qwen3-vl-2b", "qwen3-vl-8b"], "device": "cuda", "dtype": "bfloat16",
        "image_sizes": [224, 448, 896], "prompt_tokens": [32, 256, 1024], "output_tokens": [1, 16, 64, 256, 512],
        "repeats": 2, "out": "runs/gpu-check/gpu-check.json", "plots_dir": "runs/gpu-check",
        "escalation": {"keep_tokens": 64, "answer_tokens": 16, "repeats": 5},
    },
}
FAILED = ("failed", "timeout", "error")
# Reuse vs cold in bf16: the two prefill orders round differently, so greedy tokens on random-weight (near-tie) logits
# may part; the first answer logits must still agree to this fraction of their largest magnitude. float32: exact.
BF16_LOGIT_TOL = 0.05
TESTS_TIMEOUT_S = 600  # the GPU tests' own limit
TEST_DEVICE_ENV = "ROUTEDVLM_TEST_DEVICE"  # the device the GPU-marked tests run on (tests/conftest.py)


class BudgetExceeded(Exception):
    """The --budget-s deadline passed (internal: ends the step in flight between two calls)."""


class Budget:
    def __init__(self, seconds: float | None):
        self.deadline = None if seconds is None else time.perf_counter() + seconds

    def left(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.perf_counter()

    def check(self) -> None:
        if self.deadline is not None and time.perf_counter() >= self.deadline:
            raise BudgetExceeded()


class _Progress:
    """The progress bar the profiler updates after each call; checks the budget there (between calls)."""

    def __init__(self, bar, budget: Budget):
        self.bar, self.budget = bar, budget

    def update(self, n=1):
        self.bar.update(n)
        self.budget.check()

    def set_postfix_str(self, text):
        self.bar.set_postfix_str(text)


class Run:
    """The steps of one gpu-check: `step(name, fn)` runs fn, records it, reports it and rewrites the JSON."""

    def __init__(self, out: pathlib.Path, result: dict, budget: Budget, on_step=None):
        self.out, self.result, self.budget, self.on_step = out, result, budget, on_step
        self.result.setdefault("steps", [])

    def step(self, name: str, kind: str, fn, shape: str | None = None, counter=None):
        """Run `fn()` -> (value, extra dict); the record gets status ok unless extra says otherwise."""
        from .env import write_json

        rec = {"step": name, "kind": kind, "shape": shape}
        t0, value = time.perf_counter(), None
        if self.budget.left() is not None and self.budget.left() <= 0:
            rec.update(status="budget", reason="not started: --budget-s reached")
        else:
            try:
                value, extra = fn()
                rec.update({"status": "ok", **(extra or {})})
            except BudgetExceeded:
                rec.update(status="budget", reason="--budget-s reached during the step (the call in flight finished)")
            except Exception as exc:  # noqa: BLE001 - any failure of a step is recorded, the run goes on
                logger.exception("[gpu-check] %s failed", name)
                rec.update(status="error", error=f"{type(exc).__name__}: {exc}")
        if counter is not None:
            rec["counts"] = {**counter.take(), **rec.get("counts", {})}
        rec["seconds"] = round(time.perf_counter() - t0, 2)
        self.result["steps"].append(rec)
        write_json(self.out, self.result)
        if self.on_step is not None:
            self.on_step(rec)
        return value

    def skip(self, name: str, kind: str, reason: str, shape: str | None = None, status: str = "skipped") -> None:
        from .env import write_json

        rec = {"step": name, "kind": kind, "shape": shape, "status": status, "reason": reason, "seconds": 0.0}
        self.result["steps"].append(rec)
        write_json(self.out, self.result)
        if self.on_step is not None:
            self.on_step(rec)

    def exit_code(self) -> int:
        statuses = [s["status"] for s in self.result["steps"]]
        return 1 if any(s in FAILED for s in statuses) else 2 if "budget" in statuses else 0


def step_line(rec: dict) -> str:
    """One console line per step: status, wall time, and the reason or error when not ok."""
    why = rec.get("error") or rec.get("reason") or ""
    counts = ", ".join(f"{k} {v}" for k, v in (rec.get("counts") or {}).items() if v)
    return (f"[gpu-check] {rec['step']:<28} {rec['status']:<7} {rec['seconds']:8.1f} s" + (f"  [{counts}]" if counts else "")
            + (f"  {why}" if why else ""))


def check_escalation(e: dict) -> tuple[str, str | None]:
    """(status, reason) of one escalation result: reuse and cold must give the same tokens (float32), or in a
    lower precision first logits within BF16_LOGIT_TOL of each other (relative to their largest magnitude)."""
    if e["same_tokens"]:
        return "ok", None
    diff = e.get("first_logits_max_rel_diff")
    if e["dtype"] != "float32" and diff is not None and diff <= BF16_LOGIT_TOL:
        return "ok", None
    return "failed", (f"reuse and cold second stage disagree on {e['model']} ({e['dtype']}): different tokens, "
                      f"first logits differ by {diff} of their scale (tolerance {BF16_LOGIT_TOL} off float32, 0 in it)")


def gpu_tests(device: str, root: pathlib.Path | None = None, timeout: float = 600, collect_only: bool = False) -> dict:
    """Run (or with `collect_only`, count) `pytest -m gpu` from a checkout on `device` (env ROUTEDVLM_TEST_DEVICE);
    skipped off CUDA (unless counting) or outside a checkout."""
    if not collect_only and not device.startswith("cuda"):
        return {"status": "skipped", "reason": f"device {device!r} is not a CUDA device"}
    root = pathlib.Path.cwd() if root is None else pathlib.Path(root)
    if not (root / "tests").is_dir():
        return {"status": "skipped", "reason": f"no tests/ folder under {root} (run from a repository checkout)"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "tests"]
    cmd += ["--collect-only"] if collect_only else []
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", **{TEST_DEVICE_ENV: device})
    try:
        res = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=max(timeout, 1), env=env)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "command": " ".join(cmd), "timeout_s": round(timeout)}
    summary = (res.stdout.strip().splitlines() or [""])[-1]
    out = {"status": "passed" if res.returncode == 0 else "failed", "returncode": res.returncode, "device": device,
           "command": " ".join(cmd), "summary": summary, "tail": res.stdout[-3000:] + res.stderr[-2000:]}
    if collect_only:
        out["tests"] = sum(1 for ln in res.stdout.splitlines() if "::" in ln)
    return out


def _profile_shape(vlm, settings, budget: Budget, show_progress: bool) -> dict:
    """The profile.json entry of one built shape (`profiler.model_entry`), log-softmax-free, with its resources."""
    from tqdm.auto import tqdm

    from ..sides.local.generation import lean
    from .env import resources
    from .profiler import model_entry

    t0 = time.perf_counter()
    if settings.device.startswith("cuda"):
        import torch

        torch.cuda.reset_peak_memory_stats(torch.device(settings.device))
    calls = len(settings.image_sizes) * (settings.repeats * len(settings.prompt_tokens) + (1 if settings.warmup else 0))
    bar = tqdm(total=calls, desc=vlm.name, unit="call", disable=not show_progress)
    try:
        with lean(per_step_sync=True):
            entry = model_entry(vlm, vlm.shape_info["source"], settings, _Progress(bar, budget))
    finally:
        bar.close()
    entry["shape"] = vlm.shape_info
    entry.update(resources(settings.device, time.perf_counter() - t0))
    return entry


def _escalation(vlm, settings, params: dict) -> tuple[dict, dict]:
    from ..sides.local.generation import lean
    from .escalation import measure_escalation
    from .profiler import random_image

    with lean(per_step_sync=False):
        e = measure_escalation(vlm, random_image(settings.reference[0], settings.seed), **params)
    status, reason = check_escalation(e)
    return e, {"status": status, **({"reason": reason} if reason else {})}


def run_gpu_check(settings, shapes: list, out: pathlib.Path, plots_dir: pathlib.Path, escalation: dict, *,
                  show_progress: bool = True, memory_margin_gib: float = 1.0, budget_s: float | None = None,
                  on_step=None, tests_root=None, dry_run: bool = False) -> tuple[dict, int]:
    """The steps of the module docstring; rewrites `out` after each. Returns (the JSON content, exit status)."""
    from .dry_run import Counter, estimate_seconds
    from .env import check_device, free, hardware_info
    from .profiler import assemble
    from .shapes import check_shape_memory, resolve_shape, shape_vlm

    check_device(settings.device)
    budget, counter = (budget_s if isinstance(budget_s, Budget) else Budget(budget_s)), Counter()
    entries, esc = {}, {}
    result = assemble(settings, entries, hardware_info(settings.device), crossovers=False)
    result.update(preset="gpu-check", dry_run=dry_run, escalation=esc,
                  budget_s=None if isinstance(budget_s, Budget) else budget_s)
    run = Run(pathlib.Path(out), result, budget, on_step)
    names = [resolve_shape(s)[0] for s in shapes]

    def memory_check():
        return {n: check_shape_memory(s, settings, memory_margin_gib) for n, s in zip(names, shapes)}, \
            {"counts": {"meta_builds": len(shapes)}}

    t_all = time.perf_counter()
    result["memory_estimates"] = run.step("memory check", "memory_check", memory_check)
    for name, spec in zip(names, shapes):
        if result["steps"][0]["status"] != "ok":
            run.skip(f"build {name}", "build", "the memory check did not pass", name)
            continue
        vlm = run.step(f"build {name}", "build", lambda: (shape_vlm(spec, settings.device, settings.dtype,
                       seed=settings.seed, settings=settings, margin_gib=memory_margin_gib), {"counts": {"meta_builds": 1}}),
                       name)
        if vlm is None:
            built = result["steps"][-1]["status"]
            for kind in ("profile", "escalation"):
                run.skip(f"{kind} {name}", kind, f"the shape {name!r} was not built", name,
                         "budget" if built == "budget" else "skipped")
            continue
        counter.hook(vlm.model)
        try:
            entry = run.step(f"profile {name}", "profile",
                             lambda: (_profile_shape(vlm, settings, budget, show_progress), None), name, counter)
            if entry is not None:
                entries[name] = entry
                result.update(assemble(settings, entries, result["hardware"], crossovers=len(entries) > 1),
                              steps=result["steps"])
            e = run.step(f"escalation {name}", "escalation", lambda: _escalation(vlm, settings, escalation), name, counter)
            if e is not None:
                esc[name] = e
        finally:
            counter.unhook()
            del vlm
            free(settings.device)
    result["gpu_tests"] = run.step("gpu tests", "tests", lambda: _tests(settings.device, budget, tests_root, dry_run))
    if plots_dir is not None and len(entries) > 0:
        result["written"] = run.step("plots", "plots", lambda: (_plots(result, pathlib.Path(plots_dir)), None))
    result["seconds"] = round(time.perf_counter() - t_all, 1)
    if dry_run:
        result["expected_gpu_seconds"] = estimate_seconds(result["steps"])
    from .env import write_json

    write_json(out, result)
    return result, run.exit_code()


def _tests(device: str, budget: Budget, root, dry_run: bool) -> tuple[dict, dict]:
    left = budget.left()
    res = gpu_tests(device, root, timeout=TESTS_TIMEOUT_S if left is None else min(TESTS_TIMEOUT_S, left),
                    collect_only=dry_run)
    status = {"passed": "ok", "skipped": "skipped"}.get(res["status"], res["status"])
    if status == "timeout" and left is not None and left < TESTS_TIMEOUT_S:
        status = "budget"  # cut short by --budget-s, not by the tests' own limit
    extra = {"status": status, "reason": res.get("summary") or res.get("reason")}
    if dry_run:
        extra["counts"] = {"tests": res.get("tests", 0)}
    return res, extra


def _plots(result: dict, plots_dir: pathlib.Path) -> list:
    from .plots import plot_components, plot_crossover

    return [str(plot_components(result, plots_dir / "components.png")),
            str(plot_crossover(result, plots_dir / "crossover.png"))]


def summary_lines(result: dict) -> list[str]:
    """Escalation, test and total lines for the console (the profile summary is printed by the CLI)."""
    lines = []
    for name, e in result.get("escalation", {}).items():
        lines.append(f"escalation {name}: reuse {e['reuse_ms_median']:.1f} ms vs cold {e['cold_ms_median']:.1f} ms "
                     f"({e['speedup_cold_over_reuse']:.2f}x; prefill {e['reuse_prefill_tokens']} vs "
                     f"{e['cold_prefill_tokens']} tokens, {e['image_tokens']} image tokens; same tokens: "
                     f"{e['same_tokens']})")
    tests = result.get("gpu_tests") or {}
    lines.append(f"gpu tests: {tests.get('status')} {tests.get('summary') or tests.get('reason') or ''}".rstrip())
    bad = [s["step"] for s in result.get("steps", []) if s["status"] not in ("ok", "skipped")]
    lines.append(f"gpu-check took {result.get('seconds', 0):.0f} s" + (f"; not ok: {', '.join(bad)}" if bad else "; all steps ok"))
    if "expected_gpu_seconds" in result:
        est = result["expected_gpu_seconds"]
        lines.append(f"dry run: expected on one H200 about {est['total']:.0f} s ({est['total'] / 60:.1f} min) from the "
                     "counts above and the assumptions in docs/gpu.md")
    return lines
