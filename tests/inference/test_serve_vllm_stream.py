"""Against a REAL vLLM server (`make vllm-env vllm-up`; marked `vllm`, run by `make test-vllm`, CI's vLLM tier):
`routedvlm serve` whose sides are vLLM's `toy-small` (qwen3 reasoning parser) relays vLLM's stream token by token
(issue #38): a plain model's reasoning in more than one chunk, and for it and a routed answer the streamed text equals
the non-streamed reply."""
import json

import pytest
from serve_helpers import limited_server

pytestmark = pytest.mark.vllm
QUESTION = [{"role": "user", "content": "How many red boxes are there?"}]


@pytest.fixture(scope="module")
def vllm_small():
    """'<url>' of the toy small model's vLLM server (integrations/vllm-cpu/servers.py) once it answers a chat request."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "integrations" / "vllm-cpu" / "servers.py"
    spec = importlib.util.spec_from_file_location("vllm_servers_script", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    url = f"http://127.0.0.1:{script.port('small')}/v1"
    try:
        script.chat_once("small", timeout=120)
    except Exception as exc:  # noqa: BLE001 - any failure means: not up
        pytest.fail(f"the toy small model's vLLM server does not answer at {url} ({type(exc).__name__}: {exc}): "
                    "start the servers with `make vllm-env vllm-up`")
    return url


@pytest.fixture(scope="module")
def fronted(vllm_small):
    """The port of `routedvlm serve`'s app (router `large_direct`) with both sides on vLLM's toy-small."""
    from routedvlm.inference.routed import RoutedVLM
    from routedvlm.inference.serving.server import create_app

    side = f"{vllm_small}#toy-small"
    routed = RoutedVLM.from_pretrained(side, side, "large_direct", max_direct_tokens=16, max_reason_tokens=24)
    with limited_server(create_app(routed)) as port:
        yield port


def chat(port, body, stream):
    import httpx

    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    if not stream:
        resp = httpx.post(url, json=body, timeout=300)
        assert resp.status_code == 200, resp.text
        return resp.json()["choices"][0]["message"]
    pieces = {"content": [], "reasoning": []}
    with httpx.stream("POST", url, json={**body, "stream": True}, timeout=300) as resp:
        assert resp.status_code == 200, resp.read()
        for line in resp.iter_lines():
            if line.startswith("data:") and line.strip() != "data: [DONE]":
                for choice in json.loads(line[5:]).get("choices") or []:
                    for key in pieces:
                        if (choice.get("delta") or {}).get(key):
                            pieces[key].append(choice["delta"][key])
    return pieces


def test_plain_model_on_a_vllm_side_streams_reasoning_token_by_token(fronted):
    body = {"model": "small", "messages": QUESTION, "max_tokens": 24}
    streamed, whole = chat(fronted, body, True), chat(fronted, body, False)
    assert len(streamed["reasoning"]) > 1 and "".join(streamed["reasoning"]) == whole["reasoning"]
    assert "".join(streamed["content"]) == (whole["content"] or "")


def test_routed_answer_on_a_vllm_side_streams_the_non_streamed_answer(fronted):
    """The toy model answers in one token and its stop token (so no count of chunks here; the plain model's reasoning
    above is the token-by-token check); what the relay sends must still be exactly the non-streamed answer."""
    body = {"model": "routedvlm", "messages": QUESTION}
    streamed, whole = chat(fronted, body, True), chat(fronted, body, False)
    assert streamed["content"] and "".join(streamed["content"]) == whole["content"]
