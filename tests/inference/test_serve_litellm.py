"""routedvlm serve driven by LiteLLM's SDK (issue #38): `openai/<model>` and `hosted_vllm/<model>` with `api_base`,
LiteLLM's sampling defaults, a streamed plain model and a text completion. LiteLLM's pins conflict with the project
lock, so it runs in its own venv (.venv-clients, built by `make clients-env`, which `make test` runs first): this test
starts the session's server and runs integrations/clients/litellm_drive.py there (marked `clients`)."""
import json
import os
import subprocess
from pathlib import Path

import pytest
from serve_helpers import KEY

pytestmark = pytest.mark.clients
ROOT = Path(__file__).resolve().parents[2]


def test_litellm_sdk_gets_answers_streams_and_completions(served):
    python = ROOT / os.environ.get("CLIENTS_VENV", ".venv-clients") / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{python} is missing: build the clients venv with `make clients-env`")
    run = subprocess.run([str(python), str(ROOT / "integrations" / "clients" / "litellm_drive.py"), served["url"], KEY],
                         capture_output=True, text=True, timeout=600, env={**os.environ, "LITELLM_LOG": "ERROR"})
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    for provider in ("openai", "hosted_vllm"):
        assert out[provider]["content"] is not None and out[provider]["completion_tokens"] >= 1, out
    assert out["stream_chunks"] >= 5 and out["stream_reasoning"]  # the plain model's thinking, token by token
    assert out["text_completion"]
