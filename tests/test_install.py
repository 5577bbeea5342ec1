"""The install story: full hashed locks for the CPU and GPU sets, and Makefile targets that keep the two venvs apart."""
import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PIN = re.compile(r"^([A-Za-z0-9._-]+)(\[[^\]]*\])?==([^ \\]+)")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _lock(path: Path) -> dict:
    """{normalised name: version} of a lock; asserts every requirement line is pinned with == and hashed."""
    pins, current = {}, None
    for line in path.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line.startswith(" "):
            if "--hash=sha256:" in line and current is not None:
                pins[current][1] += 1
            continue
        m = PIN.match(line)
        assert m, f"{path.name}: not an exact pin: {line!r}"
        current = _norm(m.group(1))
        pins[current] = [m.group(3), 0]
    assert all(n > 0 for _, n in pins.values()), [k for k, (_, n) in pins.items() if n == 0]
    return {k: v for k, (v, _) in pins.items()}


def _inputs(path: Path) -> dict:
    """{normalised name: pinned version or None} of a *.in file, following -r includes."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line.startswith("-r "):
            out.update(_inputs(path.parent / line[3:].strip()))
        elif line:
            name = re.split(r"[=<>\[ ]", line)[0]
            out[_norm(name)] = line.split("==")[1] if "==" in line else None
    return out


def test_cpu_lock_pins_every_input_with_hashes_and_the_cpu_torch():
    lock = _lock(ROOT / "requirements.txt")
    assert lock["torch"] == "2.13.0+cpu"
    assert not any(k.startswith("nvidia-") for k in lock)  # no CUDA libraries in the CPU set
    for name, version in _inputs(ROOT / "requirements.in").items():
        assert name in lock, name
        assert version is None or lock[name] == version, (name, version, lock[name])
    assert len(lock) > 100  # the transitive closure, not the inputs alone


def test_gpu_lock_takes_the_cuda_torch_and_shares_the_core_pins():
    gpu, cpu = _lock(ROOT / "requirements-gpu.txt"), _lock(ROOT / "requirements.txt")
    assert gpu["torch"] == "2.13.0" and any(k.startswith("nvidia-cuda-runtime") for k in gpu)
    for name, version in _inputs(ROOT / "requirements-core.in").items():
        assert gpu[name] == cpu[name] and (version is None or gpu[name] == version), name


def _make_n(*targets) -> list:
    """What `make -n -B targets` would run; the same whether pytest runs alone or under `make test` (a parent make's
    MAKEFLAGS/MAKELEVEL would add flags and "Entering/Leaving directory" lines)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES")}
    out = subprocess.run(["make", "--no-print-directory", "-n", "-B", *targets], cwd=ROOT, capture_output=True,
                         text=True, check=True, env=env).stdout
    return [ln for ln in out.splitlines() if ln.strip()]


def test_gpu_check_builds_only_its_own_venv():
    lines = _make_n("gpu-check")
    assert any(".venv-gpu/bin/pip install" in ln and "-r requirements-gpu.txt" in ln for ln in lines)
    assert lines[-1].startswith(".venv-gpu/bin/routedvlm profile --preset gpu-check")
    for ln in lines:  # nothing of the CPU venv or its lock
        assert not re.search(r"(^|[\s/])\.venv/", ln) and "requirements.txt" not in ln, ln
    joined = " ".join(lines)
    assert "PIP_CONFIG_FILE=/dev/null" in joined and "-u PIP_FIND_LINKS" in joined  # no local CPU torch stands in


def test_cpu_install_installs_exactly_the_lock_and_leaves_the_gpu_venv():
    lines = _make_n("install")
    assert ".venv/bin/pip install --no-deps -r requirements.txt" in lines
    assert ".venv/bin/pip check" in lines
    assert not any(".venv-gpu" in ln or "requirements-gpu" in ln for ln in lines)
    assert not any(".venv-gpu" in ln for ln in _make_n("test", "demo"))


def test_lock_target_compiles_both_inputs_with_uv():
    joined = " ".join(_make_n("lock"))
    assert "uv pip compile requirements.in" in joined and "uv pip compile requirements-gpu.in" in joined
    assert "--generate-hashes" in joined


def test_the_dry_run_target_runs_on_the_cpu_venv():
    lines = _make_n("gpu-check-dry-run")
    assert lines[-1].startswith(".venv/bin/routedvlm profile --preset gpu-check --dry-run")
    assert not any(".venv-gpu" in ln for ln in lines)


def test_vllm_env_installs_routedvlm_with_its_packages_at_the_cpu_locks_versions():
    """.venv-vllm holds vLLM's freeze plus routedvlm's own packages (hashed, at the CPU lock's versions, none that
    vLLM's freeze pins already) and routedvlm itself; the engine tests run there, the server tests in .venv."""
    extra, cpu = _lock(ROOT / "integrations" / "vllm-cpu" / "requirements-routedvlm.txt"), _lock(ROOT / "requirements.txt")
    frozen = {_norm(m.group(1)) for line in (ROOT / "integrations" / "vllm-cpu" / "requirements.txt").read_text().splitlines()
              if (m := PIN.match(line))}
    assert {"pandas", "pyarrow", "lightgbm", "pytest", "pytest-timeout"} <= set(extra)
    assert all(cpu[name] == version for name, version in extra.items()) and not set(extra) & frozen
    lines = _make_n("vllm-env")
    assert any("requirements.txt requirements-routedvlm.txt" in ln for ln in lines)
    assert ".venv-vllm/bin/pip install --no-deps --no-build-isolation -e ." in lines
    engine = " ".join(_make_n("test-vllm-engine"))
    assert ".venv-vllm/bin/python -m pytest -q -m vllm_engine" in engine and "tests/inference/test_vllm_engine.py" in engine
    assert ".venv/bin/python -m pytest -q -m vllm " in " ".join(_make_n("test-vllm"))
