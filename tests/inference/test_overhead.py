"""routedvlm's own time per request (`overhead_ms`: wall time minus model calls) is recorded in the trace and exported
as the `routedvlm_overhead_seconds` Prometheus histogram."""
import time

import pytest
from routed_helpers import every_feature_router

from routedvlm.inference.serving.metrics import ServerMetrics

Q = "How many boxes?"
NAP = 0.2  # seconds each model call is made to take: far more than routedvlm's own work


@pytest.fixture(scope="module")
def pipe(tiny_pair, make_pipeline):
    return make_pipeline(*tiny_pair)


def test_the_trace_records_the_overhead_without_the_model_calls(pipe, images, monkeypatch):
    from routedvlm.inference.routed import RoutedVLM

    calls = []
    for name in ("run_strategy", "escalate"):
        real = getattr(pipe, name)

        def slow(*a, _real=real, **kw):
            calls.append(1)
            time.sleep(NAP)
            return _real(*a, **kw)

        monkeypatch.setattr(pipe, name, slow)
    vlm = RoutedVLM(pipe, every_feature_router("transfer_8"))
    t0 = time.perf_counter()
    out = vlm(image=images["wide"], question=Q)
    wall_ms = (time.perf_counter() - t0) * 1000
    overhead = out.decision["overhead_ms"]
    assert len(calls) >= 2 and out.overhead_ms == overhead > 0
    assert overhead >= out.decision["features_ms"] + out.decision["decision_ms"]  # features and decision are in it
    assert overhead + len(calls) * NAP * 1000 <= wall_ms  # the model calls are not
    assert out.latency_ms == pytest.approx(
        sum(r["vision_ms"] + r["prefill_ms"] + r["decode_ms"] for r in out.trace) + overhead)


def test_the_overhead_histogram_counts_each_answered_request():
    metrics = ServerMetrics(ready=lambda: True, router_healthy=lambda: True)
    decision = {"stage": "decision", "features_ms": 0.1, "decision_ms": 0.05, "overhead_ms": 0.25}
    metrics.answered("routedvlm", [decision], {"prompt_tokens": 3, "completion_tokens": 1})
    metrics.answered("routedvlm", [{**decision, "overhead_ms": 4.0}], {})
    text = metrics.render()[0].decode()
    assert 'routedvlm_overhead_seconds_bucket{le="0.0003"} 1.0' in text
    assert 'routedvlm_overhead_seconds_bucket{le="0.005"} 2.0' in text
    assert "routedvlm_overhead_seconds_count 2.0" in text
