"""`routedvlm serve` under a client's load: threads, big bodies, a decompression bomb, streaming.

Starts `routedvlm serve` on the shipped toy pair (loopback, free ports), one server per `--threads` setting, all
at once, and measures, side by side in one run:
1. per-request latency of `large_direct` requests (a fixed router), one in flight at a time, alternating between
   the servers, as the server's trace reports it (vision + prefill + decode) and as the client sees it (wall);
2. (the first server) five processes each sending 4 bodies of 100 MB (over the 32 MiB limit: refused before
   they are read), then of 30 MB (under it: read, parsed in a worker thread, refused as invalid):
   statuses, the server's RSS before / at its peak / after, and `GET /health` times idle and while they are
   sent; a 20000x20000 PNG (decompression bomb) request;
3. (a `large_reason` server, one thread) a `large_reason` request streamed and not: time to the first content chunk vs the
   whole answer, and whether the texts are equal.

    .venv/bin/python benchmarks/bench_serve.py [--threads 1,0] [--requests 20] [--json out.json]
"""
from __future__ import annotations

import argparse
import base64
import io
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "inference"))
TOY = ROOT / "data" / "toyworld" / "checkpoints"


def _image_url(seed: int) -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (96, 64), (40 * seed % 256, 120, 200)).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _msg(seed: int, q: str = "How many bars are taller than 3?") -> list:
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": _image_url(seed)}},
                                         {"type": "text", "text": q}]}]


def _p(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def latency(urls: dict, n: int) -> dict:
    """`large_direct` requests, one in flight at a time, alternating between the servers (one per --threads value)
    so that every setting sees the same machine load; per setting p50 / p90 / coefficient of variation."""
    import httpx

    model_ms, wall_ms = {k: [] for k in urls}, {k: [] for k in urls}
    with httpx.Client(timeout=300) as client:
        for i in range(n + 2):
            for key, url in urls.items():
                t0 = time.perf_counter()
                r = client.post(f"{url}/v1/chat/completions", json={"model": "routedvlm", "messages": _msg(i)})
                wall = (time.perf_counter() - t0) * 1000
                trace = [t for t in r.json()["routedvlm"]["trace"] if t["model"]]
                if i >= 2:  # two warm-up rounds
                    model_ms[key].append(sum(t["vision_ms"] + t["prefill_ms"] + t["decode_ms"] for t in trace))
                    wall_ms[key].append(wall)
    return {key: {"model_ms_p50": round(statistics.median(m), 1), "model_ms_p90": round(_p(m, 0.9), 1),
                  "model_ms_cv": round(statistics.stdev(m) / statistics.mean(m), 2),
                  "wall_ms_p50": round(statistics.median(wall_ms[key]), 1), "wall_ms_p90": round(_p(wall_ms[key], 0.9), 1)}
            for key, m in model_ms.items()}


_SENDER = """import sys, httpx
body, out = open(sys.argv[2], "rb").read(), []
with httpx.Client(timeout=300) as client:
    for _ in range(int(sys.argv[3])):
        try:
            out.append(client.post(sys.argv[1], content=body, headers={"content-type": "application/json"}).status_code)
        except httpx.TransportError as exc:
            out.append(type(exc).__name__)
print("\\n".join(map(str, out)))
"""
SENDS = 4  # bodies per sender process, one after another


def big_bodies(url: str, pid: int, mb: int, tmp: Path) -> dict:
    """Five concurrent `mb` MB bodies, each sent by its own process (so the probe's timings are the server's),
    while this process probes GET /health."""
    import subprocess

    from serve_helpers import rss_mb

    body = tmp / f"body-{mb}.json"
    with open(body, "wb") as f:
        f.write(b'{"model": "routedvlm", "pad": "' + b"x" * (mb * 1_000_000) + b'"}')
    idle = _health_ms(url, 2.0)
    before, busy, done = rss_mb(pid), [], threading.Event()
    prober = threading.Thread(target=_health_ms, args=(url, 600.0), kwargs={"out": busy, "until": done})
    prober.start()
    senders = [subprocess.Popen(_sender_cmd(f"{url}/v1/chat/completions", body), stdout=subprocess.PIPE, text=True)
               for _ in range(5)]
    peak = before
    while any(p.poll() is None for p in senders):
        peak = max(peak, rss_mb(pid))
        time.sleep(0.05)
    done.set()
    prober.join()
    body.unlink()
    return {"body_mb": mb, "statuses": sorted({c for p in senders for c in p.stdout.read().split()}), "rss_mb_before": round(before),
            "rss_mb_peak": round(peak), "rss_mb_after": round(rss_mb(pid)),
            "health_ms_idle_p50_max": [round(statistics.median(idle), 1), round(max(idle), 1)],
            "health_ms_busy_p50_max": [round(statistics.median(busy), 1), round(max(busy), 1)] if busy else None}


def _sender_cmd(url: str, body: Path) -> list:
    """curl when present (it streams the file and stops at the server's early answer), else a Python sender."""
    import shutil

    if shutil.which("curl"):
        one = ["-s", "-o", "/dev/null", "-w", "%{http_code}\\n", "-H", "content-type: application/json", "-H", "Expect:",
               "--data-binary", f"@{body}", url]
        return ["curl", *one, *[a for _ in range(SENDS - 1) for a in ("--next", *one)]]
    return [sys.executable, "-c", _SENDER, url, str(body), str(SENDS)]


def _health_ms(url: str, seconds: float, out=None, until=None) -> list:
    """GET /health times (ms) for `seconds`, or until the `until` event is set."""
    import httpx

    out, end = [] if out is None else out, time.monotonic() + seconds
    with httpx.Client(timeout=60) as client:  # one client: a new one per call costs more than the call
        while time.monotonic() < end and not (until is not None and until.is_set()):
            t0 = time.perf_counter()
            client.get(f"{url}/health")
            out.append((time.perf_counter() - t0) * 1000)
            time.sleep(0.02)
    return out


def bomb(url: str) -> list:
    import httpx
    from serve_helpers import bomb_png, image_part

    data = "data:image/png;base64," + base64.b64encode(bomb_png()).decode()
    r = httpx.post(f"{url}/v1/chat/completions", json={"model": "routedvlm", "messages": [image_part(data)]}, timeout=60)
    return [r.status_code, r.json()["error"]["code"], len(bomb_png())]


def streaming(url: str) -> dict:
    import httpx

    body = {"model": "routedvlm", "messages": _msg(3, "Which bar is the tallest?")}
    t0 = time.perf_counter()
    plain = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=300).json()
    whole_ms = (time.perf_counter() - t0) * 1000
    first_ms, text = None, ""
    t0 = time.perf_counter()
    with httpx.stream("POST", f"{url}/v1/chat/completions", json={**body, "stream": True}, timeout=300) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                event = json.loads(line[6:])
                delta = event["choices"][0]["delta"].get("content") if event["choices"] else None
                if delta and first_ms is None:
                    first_ms = (time.perf_counter() - t0) * 1000
                text += delta or ""
    return {"strategy": plain["routedvlm"]["strategy"], "first_chunk_ms": round(first_ms or -1, 1),
            "non_streamed_ms": round(whole_ms, 1), "streamed_total_ms": round((time.perf_counter() - t0) * 1000, 1),
            "equal": text == plain["choices"][0]["message"]["content"]}


def main() -> int:
    import contextlib

    from serve_helpers import serve_process

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,0", help="comma-separated --threads values (0: torch's default)")
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # the servers' thread count is what --threads says
        os.environ.pop(var, None)
    out, tmp = {}, Path(tempfile.mkdtemp())
    flags = ["--small", str(TOY / "small"), "--large", str(TOY / "large"), "--log-level", "warning",
             "--max-direct-tokens", "8", "--max-reason-tokens", "64"]
    with contextlib.ExitStack() as stack:
        servers = {t: stack.enter_context(serve_process([*flags, "--router", "large_direct", "--threads", t],
                                                        tmp / f"serve-{t}.log")) for t in args.threads.split(",")}
        out["threads"] = latency({t: url for t, (url, _) in servers.items()}, args.requests)
        for t in servers:  # serve's ready line says how many torch threads it runs
            line = next(x for x in (tmp / f"serve-{t}.log").read_text().splitlines() if "torch thread" in x)
            out["threads"][t]["torch_threads"] = int(line.rsplit(", ", 1)[1].split()[0])
        print(f"threads: {out['threads']}", flush=True)
        url, proc = next(iter(servers.values()))
        out["big_bodies"] = [big_bodies(url, proc.pid, mb, tmp) for mb in (100, 30)]
        out["bomb"] = bomb(url)
        print(f"big bodies: {out['big_bodies']}\nbomb: {out['bomb']}", flush=True)
    with serve_process([*flags, "--router", "large_reason", "--threads", "1"], tmp / "serve-stream.log") as (url, _):
        out["streaming"] = streaming(url)
        print(f"streaming: {out['streaming']}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
