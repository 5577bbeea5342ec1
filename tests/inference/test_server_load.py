"""A bounded loopback load test of `routedvlm serve`: 20 concurrent valid requests (images and text only, streamed
and not) interleaved with bad ones (a decompression bomb, an unsupported media type, bodies over the limit with
and without Content-Length, broken JSON, a sampling parameter, two images). Every valid request gets its
policy's answer, every bad one a 4xx, the server stays up and its memory returns near where it started."""
import base64
import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from routed_helpers import expected_route
from serve_helpers import KEY, QUESTIONS, bomb_png, data_url, image_part, rss_mb, user

MEMORY_SLACK_MB = 150  # allocator growth from 20 answered requests; the bad bodies (up to 1.2 MB each) add nothing


def _bad_bodies(images):
    bomb = "data:image/png;base64," + base64.b64encode(bomb_png()).decode()
    body = lambda **kw: json.dumps({"model": "routedvlm", **kw}).encode()  # noqa: E731
    return [
        ("bomb", body(messages=[image_part(bomb)]), 400),
        ("tiff", body(messages=[image_part(data_url(images["square"], "TIFF", "image/tiff"))]), 400),
        ("too large", b'{"model": "routedvlm", "pad": "' + b"x" * 1_200_000 + b'"}', 413),
        ("too large, chunked", iter([b'{"model": "routedvlm", "pad": "', b"x" * 700_000, b"x" * 700_000, b'"}']), 413),
        ("broken json", b'{"model": "routedvlm", "messages": [', 400),
        ("temperature", body(messages=user(images["tall"], "Color?"), temperature=7), 400),
        ("two images", body(messages=user(images["tall"], "Color?", n_images=2)), 400),
    ]


def _send(url, kind, payload):
    import httpx

    headers = {"Authorization": f"Bearer {KEY}", "content-type": "application/json"}
    if kind == "valid":
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=payload, headers=headers, timeout=300) as r:
            text = r.read().decode()
        if payload.get("stream"):
            events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
            content = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
        else:
            content = json.loads(text)["choices"][0]["message"]["content"]
        return r.status_code, r.headers.get("x-routedvlm-strategy"), content
    r = httpx.post(f"{url}/v1/chat/completions", content=payload, headers=headers, timeout=300)
    return r.status_code, None, r.json()["error"]["code"]


@pytest.mark.slow
def test_concurrent_valid_and_bad_requests(served, served_local, images):
    import httpx

    url, pid = served["url"], served["pid"]
    names = ["square", "wide", "tall", None]
    valid = [(names[i % 4], QUESTIONS[i % 3], i % 5 < 2) for i in range(20)]  # 12 distinct requests, 8 streamed
    for name, q, stream in valid[:4]:  # warm up every kind once, then take the baseline
        _send(url, "valid", {"model": "routedvlm", "messages": user(images.get(name), q), "stream": stream})
    start = rss_mb(pid)
    bad, jobs = _bad_bodies(images), []
    for i, (name, q, stream) in enumerate(valid):
        jobs.append(("valid", {"model": "routedvlm", "messages": user(images.get(name), q), "stream": stream}, (name, q)))
        if i % 2 == 1:
            label, payload, status = bad[(i // 2) % len(bad)]
            jobs.append(("bad", payload, (label, status)))
    with ThreadPoolExecutor(max_workers=12) as pool:
        futures = [pool.submit(_send, url, kind, payload) for kind, payload, _ in jobs]
        results = [f.result(timeout=600) for f in futures]
    refs = {}
    for (kind, _, info), (status, strategy, content) in zip(jobs, results):
        if kind == "bad":
            assert status == info[1], (info, status, content)
            continue
        name, q = info
        if info not in refs:
            refs[info] = served_local(image=images.get(name), question=q)
        ref = refs[info]
        assert (status, strategy, content) == (200, ref.strategy, ref.text) and strategy == expected_route(q), info
    assert sum(kind == "bad" for kind, _, _ in jobs) == 10
    assert httpx.get(f"{url}/health", timeout=30).json()["status"] == "ok"
    end = rss_mb(pid)
    print(f"server RSS {start:.0f} MB before, {end:.0f} MB after {len(jobs)} requests")
    assert end < start + MEMORY_SLACK_MB
