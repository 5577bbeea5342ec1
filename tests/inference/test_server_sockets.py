"""routedvlm serve on real loopback sockets: idle connections closed after the head timeout, connections past the
limit and requests past the queue answered 503 + Retry-After (one log line, not one per attempt), a body cut off
halfway counted as 499 and not logged as an error, a schemathesis run against the published OpenAPI document;
in a subprocess: accept() out of file descriptors logged once, SIGTERM stopping a long generation."""
import contextlib
import re
import signal
import socket
import subprocess
import threading
import time

import pytest
from serve_helpers import KEY, PIPE_FLAGS, free_port, post, serve_process, user

HEAD_TIMEOUT = 2


@contextlib.contextmanager
def thread_server(app, max_connections=1000, head_timeout=HEAD_TIMEOUT):
    """`app` under uvicorn with the guarded protocol, in a thread of this process; yields the base URL."""
    import uvicorn

    from routedvlm.inference.serving.connections import guarded_protocol

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", timeout_keep_alive=2,
                                           http=guarded_protocol(head_timeout, max_connections)))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(600):
        if server.started:
            break
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(60)


@pytest.fixture(scope="module")
def routed(tiny_pair, make_pipeline):
    from routedvlm.inference.routed import RoutedVLM

    return RoutedVLM(make_pipeline(*tiny_pair), "large_direct")


def _connect(port, n):
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        socks.append(s)
    return socks


def _chat_ok(url):
    return post(url, {"model": "routedvlm", "messages": user(None, "Hi?")}).status_code == 200


def test_300_idle_connections_are_closed_and_past_the_limit_refused(routed, caplog):
    import httpx

    from routedvlm.inference.serving.server import create_app

    with caplog.at_level("WARNING", logger="routedvlm.inference.serving.guards"), \
            thread_server(create_app(routed, api_key=KEY), max_connections=100, head_timeout=10) as url:
        # 10 s: all 300 connect while the first 100 are still open, so exactly 200 are beyond the limit
        port = int(url.rsplit(":", 1)[1])
        socks = _connect(port, 300)
        refused = [s for s in socks[100:] if s.recv(4096).startswith(b"HTTP/1.1 503")]
        assert len(refused) == 200
        for s in socks[:100]:  # never sent a byte: closed by the server after the head timeout
            assert s.recv(1) == b""
        for s in socks:
            s.close()
        assert httpx.get(f"{url}/health", timeout=30).status_code == 200 and _chat_ok(url)
    assert sum("refusing connections" in r.getMessage() for r in caplog.records) == 1  # not one line per attempt


def test_a_refused_connection_gets_retry_after_and_an_openai_error(routed):
    from routedvlm.inference.serving.server import create_app

    with thread_server(create_app(routed), max_connections=1) as url:
        port = int(url.rsplit(":", 1)[1])
        first, second = _connect(port, 2)
        reply = second.recv(4096).decode()
        head, _, body = reply.partition("\r\n\r\n")
        assert head.startswith("HTTP/1.1 503") and "retry-after: 1" in head.lower()
        assert '"code": "server_overloaded"' in body
        first.close(), second.close()


def test_a_slow_request_head_is_closed(routed):
    from routedvlm.inference.serving.server import create_app

    with thread_server(create_app(routed)) as url:
        s = socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=30)
        s.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n")  # the head never ends
        assert s.recv(1) == b""
        s.close()


def test_requests_past_the_queue_get_503_with_retry_after(routed, images):
    import httpx

    from routedvlm.inference.serving.server import create_app

    app = create_app(routed, max_queued=1)
    with thread_server(app) as url:
        long = threading.Thread(target=post, args=(url, {"model": "large", "messages": user(None, "Count."),
                                                         "max_tokens": 3000, "min_tokens": 3000}), daemon=True)
        long.start()
        for _ in range(2400):
            if app.state.metrics.in_flight._value.get() == 1:
                break
            time.sleep(0.05)
        resp = httpx.post(f"{url}/v1/chat/completions", json={"model": "routedvlm", "messages": user(None, "Hi?")},
                          timeout=30)
        assert resp.status_code == 503 and resp.headers["retry-after"] == "1"
        assert resp.json()["error"]["code"] == "server_overloaded"
        assert httpx.get(f"{url}/health", timeout=30).status_code == 200
        long.join(300)


def test_a_body_cut_off_halfway_is_499_and_not_an_error(served):
    import httpx

    port = int(served["url"].rsplit(":", 1)[1])
    before = open(served["log"]).read()
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
              b"authorization: Bearer " + KEY.encode() + b"\r\ncontent-length: 1000\r\n\r\n{\"model\": \"rout")
    time.sleep(0.5)
    s.close()
    metric = 'routedvlm_requests_total{model="",route="/v1/chat/completions",status="499",strategy=""}'
    for _ in range(200):
        text = httpx.get(f"{served['url']}/metrics", timeout=30).text
        if metric in text:
            break
        time.sleep(0.05)
    assert metric in text
    added = open(served["log"]).read()[len(before):]
    assert "ERROR" not in added and "Traceback" not in added


def test_schemathesis_finds_no_server_error_against_the_openapi_document(served, tmp_path):
    import sys

    st = [sys.executable, "-m", "schemathesis.cli", "run", f"{served['url']}/openapi.json", "--checks",
          "not_a_server_error", "--max-examples", "25", "--seed", "1", "--workers", "1",
          "--header", f"Authorization: Bearer {KEY}", "--request-timeout", "120", "--mode", "all"]
    out = subprocess.run(st, capture_output=True, text=True, timeout=900, cwd=tmp_path)  # its report folder goes there
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    cases = re.search(r"(\d+) generated, (\d+) passed", out.stdout)
    assert cases and int(cases.group(1)) == int(cases.group(2)) >= 50, out.stdout[-2000:]


def _limit_descriptors(n):
    def apply():
        import resource

        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))

    return apply


def test_out_of_descriptors_logged_once_and_sigterm_stops_a_long_generation(tiny_pair, tmp_path):
    """The server runs with 256 file descriptors and no connection limit below that: 400 connections exhaust them;
    accept() fails for seconds but the log gets one line; after they close it answers. Then SIGTERM during a
    4000-token generation: the server exits (shutdown timeout 1 s, then the model call stops at the next token)."""
    import httpx

    args = ["--small", tiny_pair[0].name, "--large", tiny_pair[1].name, "--router", "large_direct", "--log-level",
            "warning", "--threads", "1", "--max-connections", "5000", "--max-connections-per-client", "0",
            "--shutdown-timeout", "1", *PIPE_FLAGS]
    log = tmp_path / "server.log"
    with serve_process(args, log, preexec_fn=_limit_descriptors(256)) as (url, proc):
        port = int(url.rsplit(":", 1)[1])
        socks = _connect(port, 400)
        time.sleep(3)  # accept() is retried every second meanwhile
        for s in socks:
            s.close()
        assert httpx.get(f"{url}/health", timeout=30).status_code == 200 and _chat_ok(url)
        text = log.read_text()
        assert text.count("out of system resource") == 1, text[-3000:]
        replies = []
        body = {"model": "large", "messages": user(None, "Count."), "max_tokens": 4000, "min_tokens": 4000}
        worker = threading.Thread(target=lambda: replies.append(_try_post(url, body)), daemon=True)
        worker.start()
        for _ in range(2400):
            if "routedvlm_requests_in_flight 1.0" in httpx.get(f"{url}/metrics", timeout=30).text:
                break
            time.sleep(0.05)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        worker.join(60)
        print(f"SIGTERM to exit: {time.monotonic() - t0:.1f} s; client got {replies}")
        assert replies == [503]  # stopped at the next token, answered: not finished, not cancelled (a 500)


def _try_post(url, body):
    import httpx

    try:
        return post(url, body, key=None, timeout=300).status_code
    except httpx.TransportError as exc:
        return type(exc).__name__
