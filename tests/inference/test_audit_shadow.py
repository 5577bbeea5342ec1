"""Shadow audits on RoutedVLM and `routedvlm serve` (in-process app): the answer never waits for the audit, a
full queue skips and counts, gold feedback by request id, /metrics and /health show the status."""
import threading
import types

import pytest

from routedvlm.errors import ConfigError
from routedvlm.inference.audit.hook import AuditConfig, promise
from routedvlm.inference.audit.shadow import same_answer

pytestmark = pytest.mark.slow  # loads or runs the toy models / trains a router

WAIT = 60  # seconds a blocked test audit waits before giving up (only reached when the code under test is wrong)


@pytest.fixture
def gated(tiny_pair, make_pipeline):
    """A RoutedVLM (fixed large_direct router, audited against large_reason at alpha 0.2) whose audits block (before
    taking the model lock) until `gate` is set; `started` is set when an audit begins, `ran` lists what audits saw."""
    from routedvlm.inference.routed import RoutedVLM

    def make(rate=1.0, **audit):
        pipe = make_pipeline(*tiny_pair)
        vlm = RoutedVLM(pipe, "large_direct", audit_rate=rate, audit={"alpha": 0.2, "seed": 0, "window": 0, **audit})
        vlm.gate, vlm.started, vlm.ran = threading.Event(), threading.Event(), []
        real = vlm.auditor._audit

        def audit(item):
            vlm.started.set()
            vlm.ran.append("released" if vlm.gate.wait(WAIT) else "timed out")
            return real(item)

        vlm.auditor._audit = audit
        return vlm

    made = []
    yield lambda *a, **k: made.append(make(*a, **k)) or made[-1]
    for vlm in made:
        vlm.gate.set()
        vlm.auditor.close()


def test_the_answer_returns_before_its_audit_runs(gated, images):
    vlm = gated()
    out = vlm.generate(image=images["square"], question="Color?")
    assert out.audited and out.request_id.startswith("req-") and out.strategy == "large_direct"
    vlm.gate.set()  # only now may the audit finish: had generate waited for it, the audit would have timed out
    assert vlm.auditor.wait(WAIT)
    assert vlm.ran == ["released"]
    snap = vlm.audit_status()
    assert snap["audits"] == 1 and snap["reference"] == "large_reason" and snap["alpha"] == 0.2


def test_a_full_queue_skips_and_counts(gated, images):
    vlm = gated(queue_size=1)
    first = vlm.generate(image=images["square"], question="Color?")
    assert first.audited and vlm.started.wait(WAIT)  # the worker holds audit 1 (blocked)
    second = vlm.generate(image=images["square"], question="Color?")  # waits in the queue
    third = vlm.generate(image=images["wide"], question="Color?")  # the queue is full: skipped, not waited for
    assert second.audited and not third.audited
    vlm.gate.set()
    assert vlm.auditor.wait(WAIT)
    snap = vlm.audit_status()
    assert (snap["audits"], snap["skipped"]) == (2, 1)


def test_only_a_random_fraction_is_audited(gated, images):
    vlm = gated(rate=0.3)
    vlm.gate.set()
    outs = [vlm.generate(image=images["square"], question="Color?") for _ in range(20)]
    assert vlm.auditor.wait(WAIT)
    audited = sum(o.audited for o in outs)
    assert 0 < audited < 20 and vlm.audit_status()["audits"] == audited


def test_gold_feedback_by_request_id(gated, images):
    vlm = gated()
    vlm.gate.set()
    out = vlm.generate(image=images["square"], question="Color?")
    assert vlm.auditor.wait(WAIT)
    routed, ref = vlm.auditor._answers[out.request_id]
    vlm.audit_feedback(out.request_id, answer=ref)  # the reference's answer is the gold one
    snap = vlm.audit_status()
    assert snap["gold"] == 1 and snap["bound_on"] == "regret"
    with pytest.raises(KeyError, match="already has gold feedback"):
        vlm.audit_feedback(out.request_id, routed_correct=True, reference_correct=True)
    with pytest.raises(KeyError, match="^No audit is remembered"):
        vlm.audit_feedback("req-unknown", answer="4")


def test_records_go_to_the_sink_without_inputs_unless_asked(gated, images):
    records = []
    vlm = gated(log=records.append)
    vlm.gate.set()
    vlm.generate(image=images["square"], question="Color?")
    assert vlm.auditor.wait(WAIT)
    (rec,) = records
    assert rec["kind"] == "audit" and rec["routed_strategy"] == "large_direct" and rec["reference"] == "large_reason"
    assert rec["question"] is None and rec["image"] is None and isinstance(rec["agree"], bool)
    stored = []
    vlm2 = gated(log=stored.append, store_inputs=True)
    vlm2.gate.set()
    vlm2.generate(image=images["square"], question="Color?")
    assert vlm2.auditor.wait(WAIT)
    assert stored[0]["question"] == "Color?" and stored[0]["image"].startswith(b"\x89PNG")


def test_the_promise_comes_from_the_certificate():
    cert = {"loss": "regret vs transfer_8: 1[transfer_8 right and chosen wrong]", "reference": "transfer_8",
            "risk_limit": 0.04, "delta": 0.1, "n": 200, "bound": 0.04, "method": "ltt"}
    policy = types.SimpleNamespace(router_type="lightgbm", certificate=cert)
    assert promise(policy, AuditConfig(rate=0.1)) == ("transfer_8", 0.04, "certificate")
    bare = types.SimpleNamespace(router_type="fixed", certificate={})
    assert promise(bare, AuditConfig(rate=0.1, alpha=0.05))[:2] == ("large_reason", 0.05)
    with pytest.raises(ConfigError, match="has no regret certificate to audit"):
        promise(bare, AuditConfig(rate=0.1))
    with pytest.raises(ConfigError, match=r"^The `audit_rate` parameter must be a number in \[0, 1\]"):
        AuditConfig(rate=1.5)


def test_answers_compare_like_a_lenient_reader():
    assert same_answer(" 42. ", "42") and same_answer("Yes", "yes") and same_answer("3.0", "3")
    assert not same_answer("42", "24") and not same_answer("", "0")


def test_server_releases_the_audit_after_the_response_and_takes_feedback(gated, images):
    from fastapi.testclient import TestClient
    from serve_helpers import user

    from routedvlm.inference.serving.server import create_app

    vlm = gated()
    with TestClient(create_app(vlm, feedback_key="gold"), headers={"authorization": "Bearer gold"}) as http:
        r = http.post("/v1/chat/completions", json={"model": "routedvlm", "messages": user(images["square"], "Color?")})
        assert r.status_code == 200 and r.headers["x-routedvlm-audited"] == "1"
        rid = r.headers["x-routedvlm-request-id"]
        assert r.json()["routedvlm"]["request_id"] == rid
        vlm.gate.set()  # the response is in hand: now the audit may run
        assert vlm.auditor.wait(WAIT) and vlm.ran == ["released"]
        fb = http.post("/v1/audit/feedback", json={"request_id": rid, "routed_correct": True, "reference_correct": True})
        assert fb.status_code == 200 and fb.json()["audit"]["gold"] == 1
        assert http.post("/v1/audit/feedback", json={"request_id": rid, "answer": "x"}).status_code == 409
        assert http.post("/v1/audit/feedback", json={"request_id": "req-nope", "answer": "x"}).status_code == 404
        assert http.post("/v1/audit/feedback", json={"request_id": rid, "routed_correct": "yes"}).status_code == 400
        health = http.get("/health").json()
        assert health["audit"]["status"] == "unproven" and health["audit"]["audits"] == 1
        metrics = http.get("/metrics").text
        assert 'routedvlm_audits_total{result="done",router="large_direct"} 1.0' in metrics
        assert 'routedvlm_audit_status{router="large_direct",status="unproven"} 1.0' in metrics
        assert 'routedvlm_audit_alpha{router="large_direct"} 0.2' in metrics
