"""routedvlm serve, streamed: the official openai client's streamed text equals the non-streamed answer (with
and without images), the route in the headers and the last chunk, include_usage; /metrics parsed with
prometheus_client; a router that fails every decision shows in /health and /metrics; background loading."""
import logging
import threading

import pytest
from routed_helpers import every_feature_router, expected_route
from serve_helpers import KEY, QUESTIONS, free_port, post, user


@pytest.fixture(scope="module")
def client(served):
    from openai import OpenAI

    return OpenAI(base_url=f"{served['url']}/v1", api_key=KEY, timeout=120, max_retries=0)


def _stream(client, messages, **kw):
    raw = client.chat.completions.with_raw_response.create(model="routedvlm", messages=messages, stream=True,
                                                           stream_options={"include_usage": True}, **kw)
    chunks = list(raw.parse())
    return raw.headers, chunks


@pytest.mark.parametrize("with_image", [True, False])
@pytest.mark.parametrize("q", QUESTIONS[:3])
def test_streamed_text_equals_the_non_streamed_answer(client, images, q, with_image):
    messages = user(images["square"] if with_image else None, q)
    plain = client.chat.completions.create(model="routedvlm", messages=messages)
    headers, chunks = _stream(client, messages)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content
    assert headers["content-type"].startswith("text/event-stream")
    assert headers["x-routedvlm-strategy"] == plain.model_extra["routedvlm"]["strategy"] == expected_route(q)
    last_choice = [c for c in chunks if c.choices][-1]
    assert last_choice.choices[0].finish_reason == plain.choices[0].finish_reason
    assert last_choice.model_extra["routedvlm"]["strategy"] == expected_route(q)
    assert chunks[-1].choices == [] and chunks[-1].usage == plain.usage  # include_usage: a last chunk with the usage
    assert chunks[0].choices[0].delta.role == "assistant" and all(c.object == "chat.completion.chunk" for c in chunks)


@pytest.mark.parametrize("q", QUESTIONS[:3])
def test_the_server_streams_the_deltas_of_routed_vlm_stream(client, served_local, images, q):
    """The SSE deltas are RoutedVLM.stream's, which follow the decoding token by token (test_streaming.py)."""
    _, chunks = _stream(client, user(images["wide"], q), max_tokens=5)
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert deltas == list(served_local.stream(image=images["wide"], question=q, max_tokens=5))
    assert chunks[-1].usage.completion_tokens == 5


def test_streaming_without_usage_and_plain_models_stream_too(client, served, images):
    import httpx

    body = {"model": "routedvlm", "messages": user(images["tall"], "Color?"), "stream": True}
    r = httpx.post(f"{served['url']}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=120)
    events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]" and all('"usage"' not in e for e in events[:-1])
    small = client.chat.completions.create(model="small", messages=user(images["tall"], "Color?"), stream=True,
                                           extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    direct = client.chat.completions.create(model="small", messages=user(images["tall"], "Color?"),
                                            extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert "".join(c.choices[0].delta.content or "" for c in small if c.choices) == direct.choices[0].message.content


def test_stream_options_without_stream_is_a_400(served, images):
    r = post(served["url"], {"model": "routedvlm", "messages": user(images["tall"], "Color?"),
                             "stream_options": {"include_usage": True}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "stream_options"


def test_metrics_scrape_parses(client, served, images):
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    client.chat.completions.create(model="routedvlm", messages=user(images["square"], QUESTIONS[1]))
    post(served["url"], {"model": "routedvlm", "messages": user(images["square"], "Q"), "use_beam_search": True})
    r = httpx.get(f"{served['url']}/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(r.text)}
    requests = {tuple(sorted(s.labels.items())): s.value for s in families["routedvlm_requests"].samples
                if s.name == "routedvlm_requests_total"}
    ok = (("model", "routedvlm"), ("route", "/v1/chat/completions"), ("status", "200"), ("strategy", "large_direct"))
    assert requests[ok] >= 1 and any(dict(k)["status"] == "400" for k in requests)
    stages = {s.labels["stage"] for s in families["routedvlm_stage_duration_seconds"].samples}
    assert {"decision", "large_direct"} <= stages
    assert families["routedvlm_requests_in_flight"].samples[0].value == 0
    assert families["routedvlm_router_healthy"].samples[0].value == 1 and families["routedvlm_ready"].samples[0].value == 1
    assert families["routedvlm_request_duration_seconds"].type == "histogram"
    overhead = {s.name: s.value for s in families["routedvlm_overhead_seconds"].samples}
    assert families["routedvlm_overhead_seconds"].type == "histogram" and overhead["routedvlm_overhead_seconds_count"] >= 1


def test_router_failing_every_decision_is_unhealthy_and_logged_once(tiny_pair, make_pipeline, images, caplog):
    """The issue's case: every decision raises; the fallback answers, /health and /metrics say so, one log record."""
    from fastapi.testclient import TestClient
    from prometheus_client.parser import text_string_to_metric_families

    from routedvlm.inference.routed import RoutedVLM
    from routedvlm.inference.serving.server import create_app

    routed = RoutedVLM(make_pipeline(*tiny_pair), every_feature_router(fail=True), fallback="large_direct")
    with caplog.at_level(logging.ERROR, logger="routedvlm.inference.router_health"), TestClient(create_app(routed)) as http:
        assert http.get("/health").json()["status"] == "ok"
        for _ in range(3):
            r = http.post("/v1/chat/completions", json={"model": "routedvlm", "messages": user(images["wide"], "Color?")})
            assert r.status_code == 200 and r.headers["x-routedvlm-strategy"] == "large_direct"
        health = http.get("/health").json()
        metrics = {s.name: s for f in text_string_to_metric_families(http.get("/metrics").text) for s in f.samples}
    assert health["status"] == "degraded" and health["router_healthy"] is False and health["router_fallback"] is False
    assert health["router_error"] == "RuntimeError: scoring exploded" and health["router_decision_failures"] == 3
    assert metrics["routedvlm_router_healthy"].value == 0
    assert metrics["routedvlm_fallbacks_total"].labels == {"reason": "decision_failed"} and metrics["routedvlm_fallbacks_total"].value == 3
    assert metrics["routedvlm_router_errors_total"].labels == {"error": "RuntimeError"}
    cause = [r for r in caplog.records if "failed at decision time" in r.getMessage()]
    assert len(cause) == 1 and cause[0].exc_info is not None and "scoring exploded" in cause[0].getMessage()
    assert sum("marked unhealthy" in r.getMessage() for r in caplog.records) == 1


def test_background_loading_answers_probes_and_503_until_loaded(tiny_pair, make_pipeline, images):
    from fastapi.testclient import TestClient

    from routedvlm.inference.routed import RoutedVLM
    from routedvlm.inference.serving.server import create_app

    go = threading.Event()

    def load():
        go.wait(60)
        return RoutedVLM(make_pipeline(*tiny_pair), "large_direct")

    with TestClient(create_app(loader=load, api_key=KEY)) as http:
        assert http.get("/ready").status_code == 503 and http.get("/health").json() == {"status": "loading", "ready": False}
        r = http.post("/v1/chat/completions", json={"model": "routedvlm", "messages": user(None, "Hi?")},
                      headers={"Authorization": f"Bearer {KEY}"})
        assert r.status_code == 503 and r.json()["error"]["code"] == "model_not_ready"
        go.set()
        for _ in range(600):
            if http.get("/ready").status_code == 200:
                break
            threading.Event().wait(0.05)
        assert http.get("/ready").json() == {"ready": True}


def test_serve_exits_2_when_the_models_do_not_load(tmp_path):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "routedvlm.cli", "serve", "--small", str(tmp_path / "none"),
                          "--large", str(tmp_path / "none"), "--port", str(free_port()), "--log-level", "error"],
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 2 and "error: The checkpoint" in out.stderr and "neither an existing folder" in out.stderr


def test_a_refused_body_is_freed_at_once(tiny_pair, make_pipeline):
    """Regression: the handler's frame held the body in a traceback cycle, so every refused 30 MB body stayed in
    memory until the cyclic GC ran (RSS +29 MB per request). With the GC off, 3 refused 8 MB bodies leave < 4 MB."""
    import gc
    import tracemalloc

    from fastapi.testclient import TestClient

    from routedvlm.inference.routed import RoutedVLM
    from routedvlm.inference.serving.server import create_app

    body = b'{"model": "routedvlm", "pad": "' + b"x" * 8_000_000 + b'"}'
    with TestClient(create_app(RoutedVLM(make_pipeline(*tiny_pair), "large_direct"))) as http:
        assert http.post("/v1/chat/completions", content=body).status_code == 400  # warm up
        gc.collect()
        gc.disable()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for _ in range(3):
                assert http.post("/v1/chat/completions", content=body).json()["error"]["param"] == "messages"
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
            gc.enable()
    assert grown < 4_000_000, grown
