"""routedvlm behind the LiteLLM proxy (integrations/litellm/config.yaml, litellm[proxy] in .venv-litellm): the
`routedvlm` model group answers as serve does, with its usage, streamed, and serve's errors come back as errors
without taking the group out of rotation. Run by `make test-litellm` (deselected by default: marker `litellm`)."""
import os
import subprocess
import time
from pathlib import Path

import pytest
from serve_helpers import KEY, QUESTIONS, free_port, post, stop_process, user

pytestmark = pytest.mark.litellm
ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "integrations" / "litellm" / "config.yaml"
MASTER = "sk-routedvlm-test-master-key-0123456789"


@pytest.fixture(scope="module")
def proxy(served, tmp_path_factory):
    """The LiteLLM proxy's base URL, its one model group in front of the session's `routedvlm serve`."""
    import httpx

    binary = Path(os.environ.get("LITELLM_BIN", ROOT / ".venv-litellm" / "bin" / "litellm"))
    if not binary.exists():
        pytest.fail(f"{binary} is missing: run `make litellm-env` (or set LITELLM_BIN)")
    port, log_path = free_port(), tmp_path_factory.mktemp("litellm") / "proxy.log"
    env = {**os.environ, "ROUTEDVLM_API_BASE": f"{served['url']}/v1", "ROUTEDVLM_API_KEY": KEY,
           "LITELLM_MASTER_KEY": MASTER, "LITELLM_LOG": "ERROR", "LITELLM_TELEMETRY": "False", "NO_DOCS": "True"}
    with open(log_path, "w") as log:
        proc = subprocess.Popen([str(binary), "--config", str(CONFIG), "--host", "127.0.0.1", "--port", str(port)],
                                stdout=log, stderr=subprocess.STDOUT, env=env)
        url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 300
        try:
            while True:
                if proc.poll() is not None:
                    pytest.fail(f"the proxy exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
                try:
                    if httpx.get(f"{url}/health/liveliness", timeout=5).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    pytest.fail(f"the proxy did not start within 300 s:\n{log_path.read_text()[-3000:]}")
                time.sleep(1)
            yield url
        finally:
            stop_process(proc)


def test_the_model_group_answers_as_serve_does_with_its_usage(proxy, served, images):
    q = QUESTIONS[3]
    body = {"model": "routedvlm", "messages": user(images["square"], q)}
    direct, via = post(served["url"], body), post(proxy, body, key=MASTER)
    assert via.status_code == 200, via.text
    d, v = direct.json(), via.json()
    assert v["choices"][0]["message"]["content"] == d["choices"][0]["message"]["content"]
    # serve's route headers come back prefixed, for the gateway's logs and the client
    for name in ("x-routedvlm-strategy", "x-routedvlm-models", "x-routedvlm-answer-model"):
        assert via.headers[f"llm_provider-{name}"] == direct.headers[name], name
    assert {k: v["usage"][k] for k in ("prompt_tokens", "completion_tokens")} == \
        {k: d["usage"][k] for k in ("prompt_tokens", "completion_tokens")}


def test_streaming_through_the_proxy(proxy, served, images):
    from openai import OpenAI

    q = QUESTIONS[1]
    ref = post(served["url"], {"model": "routedvlm", "messages": user(images["square"], q)}).json()
    client = OpenAI(base_url=f"{proxy}/v1", api_key=MASTER, max_retries=0)
    chunks = list(client.chat.completions.create(model="routedvlm", messages=user(images["square"], q), stream=True,
                                                 stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == ref["choices"][0]["message"]["content"]
    usage = [c.usage for c in chunks if c.usage is not None]
    assert usage and usage[-1].completion_tokens == ref["usage"]["completion_tokens"]


def test_serve_errors_pass_through_and_the_group_stays_in_rotation(proxy, images):
    bad = {"model": "routedvlm", "messages": user(images["square"], "Two images?", n_images=2)}  # serve: --max-images 1
    resp = post(proxy, bad, key=MASTER)
    assert resp.status_code == 400, resp.text
    assert "image" in resp.json()["error"]["message"].lower()
    ok = post(proxy, {"model": "routedvlm", "messages": user(images["square"], QUESTIONS[0])}, key=MASTER)
    assert ok.status_code == 200, ok.text  # no cooldown: the next request is answered
