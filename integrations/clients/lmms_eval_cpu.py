"""`python lmms_eval_cpu.py ARGS` runs lmms-eval's CLI exactly as `python -m lmms_eval ARGS` does, on CPU torch
(tests/inference/test_serve_lmms_eval.py). lmms-eval requires torchvision, and the registry's torchvision is a CUDA
build whose compiled ops cannot load beside CPU torch: importing it fails with "operator torchvision::nms does not
exist". The start-up hook of the vLLM environment (integrations/vllm-cpu/compat/vllm_cpu_compat.py) defines those two
op schemas first, so torchvision's pure-Python parts import; lmms-eval's OpenAI model never calls the compiled ops."""
import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "vllm-cpu" / "compat"))
import vllm_cpu_compat  # noqa: E402

vllm_cpu_compat.install()
sys.argv[0] = "lmms_eval"
runpy.run_module("lmms_eval", run_name="__main__", alter_sys=True)
