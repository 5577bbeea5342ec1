"""`vllm bench serve` (vLLM's own load generator, from the vLLM environment) against `routedvlm serve` with its DEFAULT
backend (streamed POST /v1/completions), as a user would point it at a vLLM endpoint (issue #38). Serve's sides are
the real vLLM servers of the toy pair (`make vllm-env vllm-up`; marked `vllm`, run by `make test-vllm`): its plain
model `large` passes each request through to the large server, its routed model answers the prompt as a question
under mutual verification. Every request must succeed with output tokens and a time to first token."""
import json
import os
import subprocess
from pathlib import Path

import pytest
from serve_helpers import serve_process

pytestmark = pytest.mark.vllm
ROOT = Path(__file__).resolve().parents[2]
PROMPTS = 8


def vllm_bin() -> Path:
    venv = Path(os.environ.get("VLLM_VENV") or ROOT / ".venv-vllm")
    path = (venv if venv.is_absolute() else ROOT / venv) / "bin" / "vllm"
    if not path.exists():
        pytest.fail(f"{path} is missing: build the vLLM environment with `make vllm-env`")
    return path


@pytest.fixture(scope="module")
def serve(vllm_servers, tmp_path_factory):
    log = tmp_path_factory.mktemp("bench-serve") / "serve.log"
    with serve_process(["--small", vllm_servers["small"], "--large", vllm_servers["large"], "--router",
                        "mutual-verification", "--log-level", "warning"], log,
                       env={**os.environ, "ROUTEDVLM_REQUIRE_PREFIX_CACHE": "0"}) as (url, _):
        yield url


@pytest.mark.parametrize("model", ["large", "routedvlm"])
def test_vllm_bench_serve_with_its_default_backend_reports_sensible_numbers(serve, model, tmp_path):
    ckpt = ROOT / "data" / "toyworld" / "checkpoints" / "large"  # the tokenizer vllm bench counts tokens with
    cmd = [str(vllm_bin()), "bench", "serve", "--base-url", serve, "--model", str(ckpt), "--served-model-name", model,
           "--dataset-name", "random", "--random-input-len", "16", "--random-output-len", "8", "--num-prompts",
           str(PROMPTS), "--max-concurrency", "4", "--seed", "1", "--disable-tqdm", "--save-result", "--result-dir",
           str(tmp_path), "--result-filename", "result.json"]
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
           "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"vllm bench serve failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["completed"] == PROMPTS and result.get("failed", 0) == 0, done.stdout[-3000:]
    assert result["total_output_tokens"] > 0 and result["output_throughput"] > 0
    ttfts = result.get("ttfts") or []
    assert result["median_ttft_ms"] > 0 and (not ttfts or all(t > 0 for t in ttfts))
    assert all(n > 0 for n in result.get("output_lens", [1]))  # every request answered with text
