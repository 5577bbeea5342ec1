"""POST /v1/audit/feedback as a hostile client meets it: the chat key does not authorise gold (its own key, 403
when the server has none), a body nested 30,000 deep is 400 and a large one 413 (not a RecursionError 500), 503
while the models load, gold that contradicts the audit while it is queued is refused without failing the audit,
the route is in /openapi.json and a schemathesis run against it finds no server error."""
import re
import subprocess
import sys
import threading

import pytest
from serve_helpers import user

pytestmark = pytest.mark.slow  # runs the toy models

WAIT = 60


@pytest.fixture(scope="module")
def audited(tiny_pair, make_pipeline):
    """A RoutedVLM answering large_direct, every request audited against large_direct itself (they always agree)."""
    from routedvlm.inference.routed import RoutedVLM

    vlm = RoutedVLM(make_pipeline(*tiny_pair), "large_direct", audit_rate=1.0,
                    audit={"alpha": 0.2, "seed": 0, "window": 0, "reference": "large_direct"})
    yield vlm
    vlm.auditor.close()


def _chat(http, images, key="chat"):
    r = http.post("/v1/chat/completions", json={"model": "routedvlm", "messages": user(images["square"], "Color?")},
                  headers={"authorization": f"Bearer {key}"})
    assert r.status_code == 200 and r.headers["x-routedvlm-audited"] == "1"
    return r.headers["x-routedvlm-request-id"]


def test_only_the_feedback_key_gives_gold(audited, images):
    from fastapi.testclient import TestClient

    from routedvlm.inference.serving.server import create_app

    gold = {"routed_correct": True, "reference_correct": True}
    with TestClient(create_app(audited, api_key="chat", feedback_key="gold")) as http:
        rid = _chat(http, images)
        assert audited.auditor.wait(WAIT)
        chat_key = http.post("/v1/audit/feedback", json={"request_id": rid, **gold},
                             headers={"authorization": "Bearer chat"})
        assert chat_key.status_code == 401 and "does not authorise gold" in chat_key.json()["error"]["message"]
        assert http.post("/v1/audit/feedback", json={"request_id": rid, **gold}).status_code == 401
        ok = http.post("/v1/audit/feedback", json={"request_id": rid, **gold}, headers={"authorization": "Bearer gold"})
        assert ok.status_code == 200 and ok.json()["audit"]["gold"] == 1
        again = http.post("/v1/audit/feedback", json={"request_id": rid, **gold},
                          headers={"authorization": "Bearer gold"})
        assert again.status_code == 409  # counted once
        snap = http.get("/health").json()["audit"]
        assert snap["gold"] == 1 and "gold_free_upper_bound" in snap  # the bound without gold, reported beside
        assert http.post("/v1/audit/feedback", json={"request_id": rid, **gold},
                         headers={"authorization": "Bearer chat"}).status_code == 401
    with TestClient(create_app(audited, api_key="chat")) as http:  # no feedback key: gold is off
        off = http.post("/v1/audit/feedback", json={"request_id": rid, **gold}, headers={"authorization": "Bearer chat"})
        assert off.status_code == 403 and off.json()["error"]["code"] == "feedback_disabled"


def test_hostile_feedback_bodies_are_4xx(audited):
    from fastapi.testclient import TestClient

    from routedvlm.inference.serving.server import create_app

    with TestClient(create_app(audited, feedback_key="gold"), headers={"authorization": "Bearer gold"}) as http:
        deep = http.post("/v1/audit/feedback", content=b"[" * 30_000 + b"]" * 30_000)
        assert deep.status_code == 400 and deep.json()["error"]["code"] == "invalid_json"
        huge = http.post("/v1/audit/feedback", content=b"[" * 100_000 + b"]" * 100_000)
        assert huge.status_code == 413
        long_answer = http.post("/v1/audit/feedback", json={"request_id": "req-x", "answer": "a" * 20_000})
        assert long_answer.status_code == 400
        assert http.post("/v1/audit/feedback", json={"request_id": "req-x", "answer": True}).status_code == 400
        assert http.post("/v1/audit/feedback", json=[1, 2]).status_code == 400


def test_feedback_while_loading_is_503():
    from fastapi.testclient import TestClient

    from routedvlm.inference.serving.server import create_app

    release = threading.Event()
    app = create_app(loader=lambda: release.wait(WAIT), feedback_key="gold")
    try:
        with TestClient(app, headers={"authorization": "Bearer gold"}) as http:
            r = http.post("/v1/audit/feedback", json={"request_id": "req-x", "answer": "4"})
            assert r.status_code == 503 and r.json()["error"]["code"] == "model_not_ready"
    finally:
        release.set()


def test_contradictory_gold_while_queued_is_refused_and_the_audit_still_counts(tiny_pair, make_pipeline, images, caplog):
    from routedvlm.inference.routed import RoutedVLM

    vlm = RoutedVLM(make_pipeline(*tiny_pair), "large_direct", audit_rate=1.0,
                    audit={"alpha": 0.2, "seed": 0, "window": 0, "reference": "large_direct"})
    gate, real = threading.Event(), vlm.auditor._audit
    vlm.auditor._audit = lambda item: gate.wait(WAIT) and real(item)
    try:
        out = vlm.generate(image=images["square"], question="Color?")
        # the routed answer IS the reference's, so "reference right, routed wrong" contradicts the audit
        vlm.audit_feedback(out.request_id, routed_correct=False, reference_correct=True)
        gate.set()
        assert vlm.auditor.wait(WAIT)
        snap = vlm.audit_status()
        assert snap["audits"] == 1 and snap["failed"] == 0 and snap["gold"] == 0
        assert any("was refused" in r.getMessage() for r in caplog.records)
    finally:
        gate.set()
        vlm.auditor.close()


def test_the_route_is_in_openapi_and_schemathesis_finds_no_server_error(audited, tmp_path):
    import httpx
    from serve_helpers import limited_server

    from routedvlm.inference.serving.server import create_app

    app = create_app(audited, api_key="chat", feedback_key="gold")
    with limited_server(app) as port:
        url = f"http://127.0.0.1:{port}"
        doc = httpx.get(f"{url}/openapi.json", timeout=30).json()
        assert "post" in doc["paths"]["/v1/audit/feedback"]
        st = [sys.executable, "-m", "schemathesis.cli", "run", f"{url}/openapi.json", "--checks", "not_a_server_error",
              "--max-examples", "40", "--seed", "1", "--workers", "1", "--header", "Authorization: Bearer gold",
              "--include-path", "/v1/audit/feedback", "--request-timeout", "60", "--mode", "all"]
        out = subprocess.run(st, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    cases = re.search(r"(\d+) generated, (\d+) passed", out.stdout)
    assert cases and int(cases.group(1)) == int(cases.group(2)) >= 20, out.stdout[-2000:]
