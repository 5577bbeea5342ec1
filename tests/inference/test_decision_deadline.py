"""A router decision that never returns (e.g. a looping tree): the fallback answers within the decision deadline,
the router is skipped while that decision still runs (one worker spent, not one per request), /health reports it
unhealthy and stalled, and it is healthy again once the decision returns."""
import threading

import numpy as np
import pytest
from serve_helpers import user


def hanging_router(release: threading.Event, calls: list):
    import pandas as pd

    from routedvlm.router import Policy, Router

    class Hanging(Router):
        def predict_proba(self, features):
            calls.append(1)
            release.wait(120)  # "never" returns until the test releases it (bounded)
            return pd.DataFrame({"small_direct": np.ones(len(features))}, index=features.index)

    return Hanging(Policy(router_type="test-hanging", mode="one-shot", strategies=["small_direct"],
                          features=["feat__prompt__question_chars"], fallback="small_direct"))


def test_a_hanging_decision_is_answered_by_the_fallback_and_health_says_so(tiny_pair, make_pipeline, images):
    from fastapi.testclient import TestClient

    from routedvlm.inference.routed import RoutedVLM
    from routedvlm.inference.serving.server import create_app

    release, calls = threading.Event(), []
    routed = RoutedVLM(make_pipeline(*tiny_pair), hanging_router(release, calls), fallback="large_direct",
                       decision_timeout=0.5)
    body = {"model": "routedvlm", "messages": user(images["wide"], "Color?")}
    try:
        with TestClient(create_app(routed)) as http:
            assert http.get("/health").json()["router_healthy"] is True
            for _ in range(3):  # the first overruns; the next two skip the stalled router
                r = http.post("/v1/chat/completions", json=body)
                assert r.status_code == 200 and r.headers["x-routedvlm-strategy"] == "large_direct"
                decision = next(t for t in r.json()["routedvlm"]["trace"] if t["stage"] == "decision")
                assert decision["fallback"] is True and "DecisionTimeout" in decision["error"]
            assert len(calls) == 1
            health = http.get("/health").json()
            assert health["status"] == "degraded" and health["router_healthy"] is False
            assert health["router_stalled"] is True and "deadline of 0.5 s" in health["router_error"]
            release.set()
            for _ in range(200):  # the abandoned decision returns
                if not routed.runner.deadline.stalled():
                    break
                release.wait(0.05)
            r = http.post("/v1/chat/completions", json=body)
            assert r.status_code == 200 and r.headers["x-routedvlm-strategy"] == "small_direct"
            health = http.get("/health").json()
            assert health["status"] == "ok" and health["router_stalled"] is False and len(calls) == 2
    finally:
        release.set()


def test_decision_timeout_must_be_positive():
    from routedvlm.inference.decision_deadline import DecisionDeadline

    for bad in (0, -1, float("nan"), True, "5"):
        with pytest.raises(ValueError, match=r"^The `decision_timeout` parameter must be a positive number"):
            DecisionDeadline(bad)


def test_a_decision_error_is_raised_in_the_callers_thread():
    from routedvlm.inference.decision_deadline import DecisionDeadline

    deadline = DecisionDeadline(30)
    with pytest.raises(KeyError, match="boom"):
        deadline.call(lambda: {}["boom"])
    assert deadline.call(lambda: 7) == 7 and not deadline.stalled()


def test_a_bounded_decision_runs_in_the_request_thread(tiny_pair, make_pipeline, images, tmp_path):
    """LightGBM's checked trees and the fixed rules finish by construction: no worker thread handoff per request
    (it cost more than the whole decision); any other router still decides under the deadline."""
    from routed_helpers import save_prompt_router

    from routedvlm.inference.routed import RoutedVLM
    from routedvlm.router import load_router

    router = load_router(save_prompt_router(tmp_path / "r"))
    seen = []
    decide = router.decide
    router.decide = lambda features: seen.append(threading.current_thread()) or decide(features)
    routed = RoutedVLM(make_pipeline(*tiny_pair), router, fallback="large_direct", decision_timeout=5)
    out = routed.generate(image=images["wide"], question="Color?")
    assert router.bounded_decision and out.strategy == "small_direct" and seen == [threading.current_thread()]
    assert routed.runner.deadline._free.empty()  # no worker was ever started
    release, calls = threading.Event(), []
    release.set()
    hanging = RoutedVLM(make_pipeline(*tiny_pair), hanging_router(release, calls), fallback="large_direct")
    hanging.generate(image=images["wide"], question="Color?")
    assert calls and not hanging.runner.router.bounded_decision
    assert not hanging.runner.deadline._free.empty()  # its worker decided, then went back to the idle queue
