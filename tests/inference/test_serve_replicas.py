"""Two `routedvlm serve` replicas on loopback, each started by the container's entrypoint as a pod would be, in
front of the same backends (the session's served pair, standing in for two vLLM servers): whichever replica answers,
the answer and the route are the same; each response, request id and /metrics names its replica; the replicas'
counters add up to the requests sent."""
import contextlib
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from routed_helpers import expected_route
from serve_helpers import KEY, QUESTIONS, post, serve_process, user

pytestmark = pytest.mark.slow
ENTRYPOINT = Path(__file__).resolve().parents[2] / "integrations" / "container" / "entrypoint.sh"
REPLICAS = ("serve-a", "serve-b")
FEEDBACK_KEY = "feedback-test-key"


@pytest.fixture(scope="module")
def replicas(served, tmp_path_factory):
    """{replica id: base url} of two serve processes over the served pair's plain models."""
    root, backend = tmp_path_factory.mktemp("replicas"), f"{served['url']}/v1"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "ROUTEDVLM_SMALL": f"{backend}#small", "ROUTEDVLM_LARGE": f"{backend}#large",
           "ROUTEDVLM_ROUTER": str(served["router"]), "ROUTEDVLM_HOST": "127.0.0.1", "ROUTEDVLM_API_KEY": KEY,
           "ROUTEDVLM_BACKEND_API_KEY": KEY, "ROUTEDVLM_FEEDBACK_KEY": FEEDBACK_KEY,
           "ROUTEDVLM_REQUIRE_PREFIX_CACHE": "0",  # the stand-in keeps no prefix cache
           "ROUTEDVLM_SERVE_LOG_LEVEL": "warning", "ROUTEDVLM_SERVE_THREADS": "1",
           # the pipeline settings of the served_local reference (conftest's make_pipeline)
           "ROUTEDVLM_SERVE_MIN_NEW_TOKENS": "4", "ROUTEDVLM_SERVE_MAX_DIRECT_TOKENS": "6",
           "ROUTEDVLM_SERVE_MAX_REASON_TOKENS": "40", "ROUTEDVLM_SERVE_MIN_REASON_TOKENS": "24"}
    with contextlib.ExitStack() as stack:
        urls = {}
        for rid in REPLICAS:
            url, _ = stack.enter_context(serve_process([], root / f"{rid}.log", command=["bash", str(ENTRYPOINT)],
                                                       env={**env, "ROUTEDVLM_REPLICA_ID": rid}))
            urls[rid] = url
        yield urls


def _ask(url, image, question):
    resp = post(url, {"model": "routedvlm", "messages": user(image, question)})
    assert resp.status_code == 200, resp.text
    return resp


def test_either_replica_gives_the_same_answer_and_names_itself(replicas, served_local, images):
    jobs = [(rid, q) for q in QUESTIONS[:4] for rid in REPLICAS]  # every question to both replicas, concurrently
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda job: (job, _ask(replicas[job[0]], images["square"], job[1])), jobs))
    by_question = {}
    for (rid, q), resp in answers:
        body = resp.json()
        assert resp.headers["x-routedvlm-replica"] == rid
        assert re.fullmatch(rf"req-{rid}-[0-9a-f]{{32}}", resp.headers["x-routedvlm-request-id"])
        assert body["routedvlm"]["request_id"] == resp.headers["x-routedvlm-request-id"]
        by_question.setdefault(q, []).append((body["choices"][0]["message"]["content"], body["routedvlm"]["strategy"]))
    for q, got in by_question.items():
        ref = served_local(image=images["square"], question=q)
        assert got == [(ref.text, ref.strategy)] * 2, q  # the same as one in-process RoutedVLM, on both replicas
        assert ref.strategy == expected_route(q)
    assert len({ans.headers["x-routedvlm-request-id"] for _, ans in answers}) == len(answers)


def test_a_stream_through_either_replica_is_the_same_answer(replicas, images):
    import json

    import httpx

    q, texts = QUESTIONS[3], []
    for rid, url in replicas.items():
        with httpx.stream("POST", f"{url}/v1/chat/completions", timeout=120, headers={"Authorization": f"Bearer {KEY}"},
                          json={"model": "routedvlm", "stream": True, "messages": user(images["square"], q)}) as resp:
            assert resp.status_code == 200 and resp.headers["x-routedvlm-replica"] == rid
            chunks = [json.loads(line[6:]) for line in resp.iter_lines() if line.startswith("data: {")]
        texts.append("".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]))
    assert texts[0] == texts[1] == _ask(replicas["serve-a"], images["square"], q).json()["choices"][0]["message"]["content"]


def test_each_replica_counts_its_own_requests_and_the_sums_are_the_fleet(replicas, images):
    import httpx

    def counts():
        out = {}
        for rid, url in replicas.items():
            text = httpx.get(f"{url}/metrics", timeout=30).text
            assert f'routedvlm_replica_info{{replica="{rid}"}} 1.0' in text
            out[rid] = sum(float(v) for v in re.findall(r'^routedvlm_requests_total\{[^}]*status="200"[^}]*\} (\S+)$',
                                                         text, re.M))
        return out

    before = counts()
    for rid in ("serve-a", "serve-b", "serve-b"):
        _ask(replicas[rid], images["square"], QUESTIONS[0])
    after = counts()
    assert {rid: after[rid] - before[rid] for rid in REPLICAS} == {"serve-a": 1, "serve-b": 2}
    assert sum(after.values()) - sum(before.values()) == 3  # Prometheus' sum over the pods is the fleet's count


def test_feedback_sent_to_the_wrong_replica_names_the_one_that_keeps_the_audit(replicas, images):
    import httpx

    rid = _ask(replicas["serve-a"], images["square"], QUESTIONS[0]).headers["x-routedvlm-request-id"]
    resp = httpx.post(f"{replicas['serve-b']}/v1/audit/feedback", json={"request_id": rid, "answer": "red"},
                      headers={"Authorization": f"Bearer {FEEDBACK_KEY}"}, timeout=30)
    assert resp.status_code == 404 and resp.json()["error"]["code"] == "other_replica"
    assert resp.json()["error"]["message"].startswith(f"Request '{rid}' was answered by replica 'serve-a'")
    resp = httpx.post(f"{replicas['serve-a']}/v1/audit/feedback", json={"request_id": rid, "answer": "red"},
                      headers={"Authorization": f"Bearer {FEEDBACK_KEY}"}, timeout=30)
    assert resp.json()["error"]["code"] == "audit_off"  # the right replica: here it does not audit at all
