"""routedvlm serve's vLLM routes (issue #38): /v1/completions (plain and routed, streamed), /v1/models entries and
readiness, /v1/models/{id}, /version, /ping, /tokenize and /detokenize, vllm:* metrics, and a dying side answered
503 + Retry-After with /health naming it; in process (FastAPI's TestClient) on the tiny pair."""
import json
import logging
import threading

import pytest
from serve_helpers import free_port, user


@pytest.fixture(scope="module")
def http(tiny_pair, make_pipeline):
    from fastapi.testclient import TestClient

    from routedvlm.inference.routed import RoutedVLM
    from routedvlm.inference.serving.server import create_app

    with TestClient(create_app(RoutedVLM(make_pipeline(*tiny_pair), "large_direct"))) as client:
        yield client


def _texts(stream_text):
    events = [json.loads(line[6:]) for line in stream_text.splitlines() if line.startswith("data: {")]
    return events, [c["text"] for e in events for c in e["choices"] if c["text"]]


def test_completions_of_a_plain_model_continue_the_raw_prompt(http, tiny_pair):
    from routedvlm.inference.sides.local.generation import timed_generate

    small = tiny_pair[0]
    body = {"model": "small", "prompt": "The colour of the sky is", "max_tokens": 6}
    r = http.post("/v1/completions", json=body)
    out = r.json()
    assert r.status_code == 200 and out["object"] == "text_completion" and out["id"].startswith("cmpl-")
    gen = timed_generate(small.model, small.encode(None, body["prompt"]), max_new_tokens=6)
    assert out["choices"][0]["text"] == small.decode(gen.token_ids)  # no chat template: the prompt as it is
    assert out["usage"]["prompt_tokens"] == len(small.text_ids(body["prompt"]))
    streamed = http.post("/v1/completions", json={**body, "stream": True, "stream_options": {"include_usage": True}})
    events, texts = _texts(streamed.text)
    assert "".join(texts) == out["choices"][0]["text"] and len(texts) >= 2
    assert all(e["object"] == "text_completion" for e in events) and events[-1]["usage"] == out["usage"]


def test_completions_of_the_routed_model_answer_the_prompt_as_the_question(http):
    routed = http.post("/v1/completions", json={"model": "routedvlm", "prompt": "Color?", "max_tokens": 5}).json()
    as_chat = http.post("/v1/chat/completions", json={"model": "routedvlm", "messages": user(None, "Color?"),
                                                      "max_tokens": 5}).json()
    assert routed["choices"][0]["text"] == as_chat["choices"][0]["message"]["content"]
    streamed = http.post("/v1/completions", json={"model": "routedvlm", "prompt": "Color?", "max_tokens": 5, "stream": True})
    assert "".join(_texts(streamed.text)[1]) == routed["choices"][0]["text"]
    bad = http.post("/v1/completions", json={"model": "small", "prompt": ["a", "b"]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "prompt"


def test_models_list_their_root_and_context_and_one_model_is_found_by_id(http, tiny_pair):
    data = {m["id"]: m for m in http.get("/v1/models").json()["data"]}
    context = tiny_pair[0].context_length()
    assert data["small"]["root"] == tiny_pair[0].name and data["small"]["max_model_len"] == context
    assert data["routedvlm"]["root"] == "large_direct"
    assert data["routedvlm"]["max_model_len"] == min(context, tiny_pair[1].context_length())
    assert http.get("/v1/models/large").json() == data["large"]
    missing = http.get("/v1/models/gpt-9")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"


def test_version_ping_tokenize_and_detokenize(http, tiny_pair):
    assert set(http.get("/version").json()) == {"version"}
    assert http.get("/ping").status_code == 200 and http.post("/ping").status_code == 200
    tok = http.post("/tokenize", json={"model": "small", "prompt": "hello there"}).json()
    assert tok["tokens"] == tiny_pair[0].text_ids("hello there") and tok["count"] == len(tok["tokens"])
    assert http.post("/detokenize", json={"model": "small", "tokens": tok["tokens"]}).json() == {"prompt": "hello there"}
    chat = http.post("/tokenize", json={"model": "small", "messages": [{"role": "user", "content": "hi"}]}).json()
    assert chat["count"] > tok["count"] - 2  # the template's tokens around it
    routed = http.post("/tokenize", json={"model": "routedvlm", "prompt": "x"})
    assert routed.status_code == 400 and "plain model" in routed.json()["error"]["message"]


def test_vllm_named_metrics_count_requests_and_tokens(http):
    from prometheus_client.parser import text_string_to_metric_families

    out = http.post("/v1/chat/completions", json={"model": "routedvlm", "messages": user(None, "Q?"), "max_tokens": 3}).json()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(http.get("/metrics").text) for s in f.samples}
    label = (("model_name", "routedvlm"),)
    assert samples[("vllm:generation_tokens_total", label)] >= out["usage"]["completion_tokens"] > 0
    assert samples[("vllm:prompt_tokens_total", label)] >= out["usage"]["prompt_tokens"]
    assert samples[("vllm:e2e_request_latency_seconds_count", label)] >= 1
    assert ("vllm:num_requests_running", ()) in samples
    small = (("model_name", "small"),)
    ttft, itl = (("vllm:time_to_first_token_seconds_count", small), ("vllm:inter_token_latency_seconds_count", small))
    streamed = http.post("/v1/chat/completions", json={"model": "small", "messages": user(None, "Q?"), "max_tokens": 6,
                                                        "stream": True})
    assert streamed.status_code == 200
    after = {(s.name, tuple(sorted(s.labels.items()))): s.value
             for f in text_string_to_metric_families(http.get("/metrics").text) for s in f.samples}
    assert after[ttft] == samples.get(ttft, 0) + 1  # one first token per streamed response
    assert after[itl] > samples.get(itl, 0)  # the stream sent more than one delta


def test_v1_routes_answer_503_while_loading_as_the_docs_say(tiny_pair, make_pipeline):
    from fastapi.testclient import TestClient

    from routedvlm.inference.routed import RoutedVLM
    from routedvlm.inference.serving.server import create_app

    go = threading.Event()

    def load():
        go.wait(60)
        return RoutedVLM(make_pipeline(*tiny_pair), "large_direct")

    with TestClient(create_app(loader=load)) as client:
        models = client.get("/v1/models")
        assert models.status_code == 503 and models.json()["error"]["code"] == "model_not_ready"
        assert client.get("/ping").status_code == 503
        go.set()
        for _ in range(600):
            if client.get("/ready").status_code == 200:
                break
            threading.Event().wait(0.05)
        assert client.get("/v1/models").status_code == 200 and client.get("/ping").status_code == 200


def test_a_dying_side_is_a_503_with_retry_after_and_health_names_it(tiny_pair, make_pipeline, caplog):
    """Issue #38: a remote model that stops answering gave 500 SideUnavailableError with a traceback in the log and
    /health stayed ok. Now: 503 + Retry-After, one log line, /health degraded naming the side, until it answers."""
    from fastapi.testclient import TestClient

    from routedvlm.inference import VLM
    from routedvlm.inference.routed import RoutedVLM
    from routedvlm.inference.serving.server import create_app

    dead = VLM.from_openai(f"http://127.0.0.1:{free_port()}/v1", "mid", max_retries=0, timeout=5,
                           require_prefix_cache=False)
    routed = RoutedVLM(make_pipeline(dead, tiny_pair[1]), "transfer_8")
    with caplog.at_level(logging.WARNING), TestClient(create_app(routed)) as client:
        r = client.post("/v1/chat/completions", json={"model": "routedvlm", "messages": user(None, "Why?")})
        health = client.get("/health").json()
        ok = client.post("/v1/chat/completions", json={"model": "large", "messages": user(None, "Why?"), "max_tokens": 3})
    assert r.status_code == 503 and r.headers["retry-after"] and r.json()["error"]["code"] == "side_unavailable"
    assert health["status"] == "degraded" and list(health["failing_sides"]) == ["small"]
    assert ok.status_code == 200
    lines = [rec for rec in caplog.records if "unavailable" in rec.getMessage()]
    assert len(lines) == 1 and lines[0].exc_info is None and "\n" not in lines[0].getMessage()
