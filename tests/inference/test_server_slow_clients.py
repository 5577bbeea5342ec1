"""routedvlm serve against slow and greedy clients, on real loopback sockets (connections.py): a body trickled a
byte at a time is answered 408 and frees its chat slot; one client address beyond its connection quota gets a
reserved probe slot (probes answer, chats 503) and then 503 at once, while another address is served; with every
connection slot taken, /health still answers on a reserved slot. Loops are bounded by socket timeouts."""
import socket
import time

import pytest
from serve_helpers import limited_server, post, user

CHAT_HEAD = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
             b"content-length: 1000\r\n\r\n")


@pytest.fixture(scope="module")
def routed(tiny_pair, make_pipeline):
    from routedvlm.inference.routed import RoutedVLM

    return RoutedVLM(make_pipeline(*tiny_pair), "large_direct")


def _connect(port, source="127.0.0.1"):
    s = socket.socket()
    s.settimeout(30)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def _client(port, source="127.0.0.1"):
    """A kept-alive HTTP connection from `source` (one connection for all its requests)."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(source, 0))
    conn.connect()
    return conn


def _request(conn, method, path, body=None):
    conn.request(method, path, body=body, headers={"content-type": "application/json"})
    resp = conn.getresponse()
    return resp.status, resp.read().decode()


CHAT = b'{"model": "routedvlm", "messages": [{"role": "user", "content": "Hi?"}]}'


def test_trickled_bodies_are_answered_408_and_free_the_chat_queue(routed, caplog):
    import httpx

    from routedvlm.inference.serving.server import create_app

    app = create_app(routed, max_queued=4)
    with caplog.at_level("WARNING", logger="routedvlm.inference.serving.guards"), \
            limited_server(app, header_timeout=1.0, body_timeout=3.0, min_body_rate=1000) as port:
        slow = []
        for _ in range(4):  # each holds a chat slot: one byte of a 1000-byte body
            s = _connect(port)
            s.sendall(CHAT_HEAD + b"{")
            slow.append(s)
        for _ in range(600):
            if app.state.metrics.in_flight._value.get() == 4:
                break
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port}"
        assert post(url, {"model": "routedvlm", "messages": user(None, "Hi?")}, key=None).status_code == 503
        for s in slow:  # after --header-timeout plus 1 s per 1000 bytes: 408, then closed
            reply = b""
            while chunk := s.recv(4096):
                reply += chunk
            assert reply.startswith(b"HTTP/1.1 408") and b'"code": "request_timeout"' in reply
            s.close()
        resp = post(url, {"model": "routedvlm", "messages": user(None, "Hi?")}, key=None)
        assert resp.status_code == 200
        assert httpx.get(f"{url}/health", timeout=30).status_code == 200
    assert sum("request body is late" in r.getMessage() for r in caplog.records) == 1  # one line, not one per client


def test_a_body_that_keeps_its_rate_is_read(routed):
    from routedvlm.inference.serving.server import create_app

    body = (b'{"model": "routedvlm", "messages": [{"role": "user", "content": "Hi?"}]' + b" " * 1500 + b"}")
    with limited_server(create_app(routed), header_timeout=1.0, body_timeout=30.0, min_body_rate=1000) as port:
        s = _connect(port)
        s.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                  f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode())
        for i in range(0, len(body), 500):  # 500 bytes per 0.2 s: 2500 B/s, above the 1000 B/s minimum
            s.sendall(body[i:i + 500])
            time.sleep(0.2)
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
        assert reply.startswith(b"HTTP/1.1 200")
        s.close()


def test_one_client_over_its_quota_gets_a_probe_slot_then_503_and_others_are_served(routed):
    from routedvlm.inference.serving.server import create_app

    with limited_server(create_app(routed), max_connections_per_client=3, probe_slots=2) as port:
        held = [_connect(port) for _ in range(3)]  # idle: the client's whole quota
        probe = _client(port)  # this client's share (half of 2) of the reserved slots: probes answer ...
        assert _request(probe, "GET", "/health")[0] == 200
        assert _request(probe, "GET", "/metrics")[0] == 200
        refused = _connect(port)  # beyond its quota and its share: refused before anything is read
        assert refused.recv(4096).startswith(b"HTTP/1.1 503")
        status, text = _request(probe, "POST", "/v1/chat/completions", CHAT)
        assert status == 503 and "reserved" in text  # ... anything else does not
        status, text = _request(_client(port, source="127.0.0.2"), "POST", "/v1/chat/completions", CHAT)
        assert status == 200, text  # another address is served
        for s in (*held, refused):
            s.close()


def test_with_every_slot_taken_health_still_answers(routed):
    from routedvlm.inference.serving.server import create_app

    with limited_server(create_app(routed), max_connections=5, probe_slots=2) as port:
        held = [_connect(port, source=f"127.0.0.{2 + i}") for i in range(5)]  # five clients fill the server
        probe = _client(port, source="127.0.1.1")
        assert _request(probe, "GET", "/health")[0] == 200
        assert _request(probe, "GET", "/ready")[0] == 200
        assert _request(probe, "GET", "/v1/models")[0] == 503
        for s in held:
            s.close()


def test_the_slow_client_flags_are_checked_and_reach_the_limits():
    from routedvlm.errors import ConfigError
    from routedvlm.inference.serving.cli import ServeConfig, build_parser

    def config(*flags):
        return ServeConfig(**vars(build_parser().parse_args(["--small", "s", "--large", "l", *flags])))

    limits = config("--max-connections-per-client", "0", "--probe-slots", "0", "--body-timeout", "30",
                    "--min-body-rate", "0").connection_limits
    assert (limits.max_connections_per_client, limits.probe_slots, limits.body_timeout, limits.min_body_rate) == \
        (0, 0, 30, 0)
    assert limits.body_deadline(10**9) == 30  # never past --body-timeout, however fast
    assert config().connection_limits.body_deadline(2048) == 10 + 2  # --header-timeout + 1 s per 1024 bytes
    for flag, value in (("--max-connections-per-client", "-1"), ("--probe-slots", "-2"), ("--body-timeout", "0"),
                        ("--min-body-rate", "-5"), ("--decision-timeout", "0")):
        with pytest.raises(ConfigError, match=rf"^The `{flag}` flag must be a positive integer"):
            config(flag, value)
