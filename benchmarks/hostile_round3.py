"""Issue #39's cases for benchmarks/bench_hostile.py: slow and greedy clients on real loopback sockets (before: the
old guards, uvicorn + head timeout + global limit; now: serve's defaults), a decision that never returns, gold
feedback from the wrong key, the outcome-table converter, policy.json fields and the audit log's files."""
import socket
import threading
import time
from collections import Counter
from pathlib import Path


def _server(app, limits):
    import uvicorn

    from routedvlm.inference.serving.connections import guarded_protocol

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="critical", timeout_keep_alive=5,
                                           http=guarded_protocol(limits.header_timeout, limits.max_connections, limits)))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return server, port


def _ask(port, method, path, body=None, source="127.0.0.2", timeout=10):
    import http.client

    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=(source, 0))
        conn.request(method, path, body=body, headers={"content-type": "application/json"})
        status = conn.getresponse().status
        conn.close()
        return status
    except (OSError, http.client.HTTPException) as exc:
        return type(exc).__name__


CHAT = b'{"model": "routedvlm", "messages": [{"role": "user", "content": "Hi?"}], "max_tokens": 2}'


def _measure(port, seconds):
    """Chats and /health probes from another address, one every 0.25 s, for `seconds`: status counts."""
    chats, probes, end = Counter(), Counter(), time.monotonic() + seconds
    while time.monotonic() < end:
        chats[_ask(port, "POST", "/v1/chat/completions", CHAT)] += 1
        probes[_ask(port, "GET", "/health")] += 1
        time.sleep(0.25)
    return chats, probes


def slow_bodies(port, n, seconds, stop):
    """`n` connections from 127.0.0.1 send a chat head, then one body byte per second; reopened when closed."""
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: 100000\r\n\r\n")
    socks = []

    def opened():
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(head)
            s.setblocking(False)
            return s
        except OSError:
            return None

    socks = [opened() for _ in range(n)]
    while not stop.is_set():
        for i, s in enumerate(socks):
            try:
                if s is None:
                    raise OSError
                s.sendall(b" ")
            except OSError:
                if s is not None:
                    s.close()
                socks[i] = opened()
        stop.wait(1.0)
    for s in socks:
        if s is not None:
            s.close()


def idle_flood(port, n, seconds, stop):
    """`n` idle connections from 127.0.0.1, each reopened as soon as the server closes it."""
    socks = [None] * n
    while not stop.is_set():
        for i, s in enumerate(socks):
            alive = False
            if s is not None:
                try:
                    alive = s.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK) != b""
                except BlockingIOError:
                    alive = True
                except OSError:
                    alive = False
            if not alive:
                if s is not None:
                    s.close()
                try:
                    socks[i] = socket.create_connection(("127.0.0.1", port), timeout=5)
                except OSError:
                    socks[i] = None
        stop.wait(0.2)
    for s in socks:
        if s is not None:
            s.close()


def socket_cases(routed, seconds=20.0):
    from routedvlm.inference.serving.cli import ServeConfig
    from routedvlm.inference.serving.connections import ConnectionLimits
    from routedvlm.inference.serving.server import create_app

    now = ServeConfig(small="s", large="l").connection_limits
    before = ConnectionLimits(header_timeout=now.header_timeout, max_connections=now.max_connections)
    print(f"\n{'socket case (20 s each; chats + /health from another address)':<62} {'guards':<7} chats / health")
    for name, attack, n in (("64 slow bodies (1 byte/s), reopened", slow_bodies, 64),
                            ("600 idle connections from one client, reopened", idle_flood, 600)):
        for label, limits in (("before", before), ("now", now)):
            server, port = _server(create_app(routed), limits)
            stop = threading.Event()
            worker = threading.Thread(target=attack, args=(port, n, seconds, stop), daemon=True)
            worker.start()
            time.sleep(2.0)  # the attack is in place
            chats, probes = _measure(port, seconds)
            stop.set()
            worker.join(30)
            server.should_exit = True
            print(f"{name:<62} {label:<7} {dict(chats)} / {dict(probes)}")


def decision_case(tiny_pair_routed):
    """A router whose decision never returns: the answer and /health, with the deadline (1 s) and without."""
    from fastapi.testclient import TestClient

    from routedvlm.inference.serving.server import create_app

    print(f"\n{'decision that never returns':<40} {'status':>6} {'ms':>8}  /health")
    for label, routed, release in tiny_pair_routed:
        with TestClient(create_app(routed)) as http:
            t0 = time.perf_counter()
            result = Counter()
            done = threading.Event()

            def call():
                result["status"] = http.post("/v1/chat/completions", content=CHAT,
                                             headers={"content-type": "application/json"}).status_code
                done.set()

            threading.Thread(target=call, daemon=True).start()
            answered = done.wait(15)
            ms = (time.perf_counter() - t0) * 1000
            health = http.get("/health").json()  # while the decision still hangs
            state = f"{health.get('status')} router_healthy={health.get('router_healthy')}"
            print(f"{label:<40} {result['status'] if answered else 'hung':>6} {ms:>8.0f}  {state}")
            release.set()  # let the hung decision return before the app stops
            done.wait(60)


def audit_log_case(root: Path):
    from routedvlm.data.audit import AuditLog, read_log

    rec = {"kind": "audit", "request_id": "", "time": 0.0, "router": "r", "reference": "large_reason", "alpha": 0.1,
           "delta": 0.05, "window": 0, "agree": True, "routed_answer": "4", "reference_answer": "4"}
    print(f"\n{'audit log, 531 records':<40} {'files':>6} {'write ms':>9} {'read-all ms (old restart)':>26} "
          f"{'restart ms (now)':>17}")
    for label, kw in (("before (a part per record)", {"rows_per_part": 1}), ("now (batches, defaults)", {})):
        path = root / f"audit-{kw.get('rows_per_part', 'batch')}.parquet"
        t0 = time.perf_counter()
        with AuditLog(path, **kw) as log:
            for i in range(531):
                log({**rec, "request_id": f"req-{i}", "time": float(i)})
        write_ms = (time.perf_counter() - t0) * 1000
        t0 = time.perf_counter()
        assert len(read_log(path)) == 531
        read_ms = (time.perf_counter() - t0) * 1000
        t0 = time.perf_counter()
        AuditLog(path).close()
        restart_ms = (time.perf_counter() - t0) * 1000
        files = len(list(Path(f"{path}.parts").glob("part-*.parquet")))
        print(f"{label:<40} {files:>6} {write_ms:>9.0f} {read_ms:>26.0f} {restart_ms:>17.0f}")


def feedback_cases(audited):
    """POST /v1/audit/feedback as the issue sent it."""
    from fastapi.testclient import TestClient

    from routedvlm.inference.serving.server import create_app

    print(f"\n{'feedback case':<50} {'status':>6} code")
    gold = {"routed_correct": True, "reference_correct": False}
    with TestClient(create_app(audited, api_key="chat", feedback_key="gold")) as http:
        r = http.post("/v1/chat/completions", content=CHAT, headers={"authorization": "Bearer chat",
                                                                      "content-type": "application/json"})
        rid = r.headers.get("x-routedvlm-request-id", "req-x")
        audited.auditor.wait(60)
        cases = (("gold sent with the chat key", {"json": {"request_id": rid, **gold}}, "chat"),
                 ("JSON nested 30,000 deep (60 KB)", {"content": b"[" * 30_000 + b"]" * 30_000}, "gold"),
                 ("JSON nested 100,000 deep (200 KB)", {"content": b"[" * 100_000 + b"]" * 100_000}, "gold"),
                 ("gold with the feedback key", {"json": {"request_id": rid, **gold}}, "gold"),
                 ("the same gold again", {"json": {"request_id": rid, **gold}}, "gold"))
        for name, kw, key in cases:
            r = http.post("/v1/audit/feedback", headers={"authorization": f"Bearer {key}"}, **kw)
            print(f"{name:<50} {r.status_code:>6} {r.json().get('error', {}).get('code', '-')}")
    release = threading.Event()
    with TestClient(create_app(loader=lambda: release.wait(60), feedback_key="gold")) as http:
        r = http.post("/v1/audit/feedback", json={"request_id": "req-x", "answer": "4"},
                      headers={"authorization": "Bearer gold"})
        print(f"{'feedback while the models load':<50} {r.status_code:>6} {r.json()['error']['code']}")
    release.set()


def converter_cases(root: Path):
    """`routedvlm labels import-outcomes` with each bad table or flag: exit status and the first line."""
    import contextlib
    import io

    import pandas as pd

    from routedvlm.data.labels.cli import main

    def mmr(cells=None):
        df = pd.DataFrame({"question": ["a?", "b?", "c?"], "big_correct": [1, 1, 1], "big_cost": [5.0] * 3,
                           "tiny_correct": [0, 1, 0], "tiny_cost": [1.0] * 3}).astype(object)
        for (col, row), v in (cells or {}).items():
            df.loc[row, col] = v
        return df

    def rb(ids, prompt="['2+2?']"):
        return pd.DataFrame({"sample_id": ids, "prompt": [prompt] + ["['x']"] * (len(ids) - 1), "eval_name": "e",
                             "a": 1.0, "a|total_cost": 1.0, "a|model_response": "4", "b": 0.0, "b|total_cost": 2.0,
                             "b|model_response": "5"})

    cases = [("NaN cost", mmr({("tiny_cost", 1): float("nan")}), "mmr-bench", []),
             ("negative cost", mmr({("tiny_cost", 1): -1.0}), "mmr-bench", []),
             ("inf cost", mmr({("tiny_cost", 1): float("inf")}), "mmr-bench", []),
             ("1e300 cost", mmr({("tiny_cost", 1): 1e300}), "mmr-bench", []),
             ("duplicate ids", rb(["a", "b", "a"]), "routerbench", []),
             ("lookalike ids (zero-width space)", rb(["a", "b\u200b", "b"]), "routerbench", []),
             ("empty table", mmr().iloc[:0], "mmr-bench", []),
             ("5 MB prompt cell", mmr({("question", 0): "x" * 5_000_000}), "mmr-bench", []),
             ("--ms-per-token small=nan", mmr(), "mmr-bench", ["--ms-per-token", "small=nan"]),
             ("--min-score nan", rb(["a", "b"]), "routerbench", ["--min-score", "nan"]),
             ("--min-score 5", rb(["a", "b"]), "routerbench", ["--min-score", "5"]),
             ("'[' + 200,000 '-' + '1]' prompt", rb(["a", "b"], "[" + "-" * 200_000 + "1]"), "routerbench", []),
             ("'[' + 50,000 '-' + '1]' prompt", rb(["a", "b"], "[" + "-" * 50_000 + "1]"), "routerbench", [])]
    print(f"\n{'import-outcomes case':<36} {'exit':>4} {'written':>7}  first line")
    for name, df, layout, flags in cases:
        src, out = root / "t.parquet", root / "o.parquet"
        df.to_parquet(src)
        out.unlink(missing_ok=True)
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(["import-outcomes", "--layout", layout, str(src), "--out", str(out), *flags])
        line = (err.getvalue().splitlines() or ["-"])[0]
        print(f"{name:<36} {code:>4} {str(out.exists()):>7}  {line[:110]}")


def policy_cases(root: Path):
    """load_router on policy.json files with one field set against its meaning."""
    import json

    from routedvlm.router import load_router

    cert = {"bound": 0.04, "delta": 0.1, "method": "ltt", "n": 200, "loss": "regret", "reference": "large_reason",
            "risk_limit": 0.05, "p_value": 0.01}
    base = {"router_type": "fixed", "mode": "one-shot", "strategies": ["large_direct"], "fallback": "large_direct",
            "rule": {"name": "fixed", "param": None, "strategy": "large_direct"}, "certificate": cert}
    binary = {"router_type": "fixed", "mode": "cascade", "strategies": ["large_direct", "large_reason"],
              "paid_stages": ["large_direct"], "fallback": "large_reason",
              "rule": {"name": "binary", "param": 0.5, "accept": "large_direct", "escalate": "large_direct"}}
    cases = [("risk_limit 5", {**base, "certificate": {**cert, "risk_limit": 5}}),
             ("risk_limit -1", {**base, "certificate": {**cert, "risk_limit": -1}}),
             ("risk_limit NaN", {**base, "certificate": {**cert, "risk_limit": float("nan")}}),
             ("reference transfer_999999", {**base, "certificate": {**cert, "reference": "transfer_999999"}}),
             ("p_value 7", {**base, "certificate": {**cert, "p_value": 7}}),
             ("binary rule escalate == accept", binary)]
    print(f"\n{'policy.json case':<36} answer")
    for name, data in cases:
        folder = root / name.replace(" ", "_")
        folder.mkdir()
        (folder / "policy.json").write_text(json.dumps(data))
        try:
            load_router(str(folder))
            answer = "loaded"
        except Exception as exc:  # noqa: BLE001 - printed
            answer = f"{type(exc).__name__}: {str(exc).splitlines()[-1].strip()[:100]}"
        print(f"{name:<36} {answer}")
