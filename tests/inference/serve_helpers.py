"""Helpers for the `routedvlm serve` tests: request bodies, a crafted decompression bomb, a server subprocess."""
import base64
import contextlib
import io
import socket
import struct
import subprocess
import threading
import sys
import time
import zlib

import pytest

KEY = "test-key"
PIPE_FLAGS = ["--min-new-tokens", "4", "--max-direct-tokens", "6", "--max-reason-tokens", "40", "--min-reason-tokens", "24"]
LIMIT_FLAGS = ["--max-images", "1", "--max-image-pixels", "20000", "--max-text-chars", "500", "--max-body-bytes", "1000000"]
QUESTIONS = ["Color?", "Which bar is tallest?", "How many red boxes are in this picture?",
             "Count the boxes, then say how many are blue and how many are green.", "Is it red?"]


def data_url(image, fmt="PNG", media="image/png") -> str:
    buf = io.BytesIO()
    image.save(buf, format=fmt)
    return f"data:{media};base64," + base64.b64encode(buf.getvalue()).decode()


def user(image, text, n_images=1):
    """One user turn with `n_images` copies of `image` (None: text only) and the question."""
    parts = [] if image is None else [{"type": "image_url", "image_url": {"url": data_url(image)}}] * n_images
    return [{"role": "user", "content": [*parts, {"type": "text", "text": text}]}]


def bomb_png(width=20000, height=20000) -> bytes:
    """A small PNG whose header declares width x height 8-bit gray pixels (its data is a few zero rows)."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    rows = zlib.compress(b"\x00" * (width + 1) * 8, 9)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", rows) + chunk(b"IEND", b"")


def image_part(url):
    return {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "Q?"}]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body, key=KEY, raw=None, timeout=120):
    import httpx

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(f"{url}/v1/chat/completions", json=body if raw is None else None, content=raw, headers=headers,
                      timeout=timeout)


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


@contextlib.contextmanager
def serve_process(args, log_path, timeout=240, command=None, **popen):
    """`routedvlm serve ARGS --port <free>` in a subprocess (`command`: another program that starts serve and takes
    its flags, e.g. the container's entrypoint; `popen`: more Popen arguments); yields (base url, Popen) once GET
    /ready (no key) is 200."""
    import httpx

    port, log = free_port(), open(log_path, "w")
    cmd = [*(command or [sys.executable, "-m", "routedvlm.cli", "serve"]), *args, "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, **popen)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                pytest.fail(f"server exited with {proc.returncode}:\n{open(log_path).read()[-3000:]}")
            try:
                if httpx.get(f"{url}/ready", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"server not ready within {timeout} s:\n{open(log_path).read()[-3000:]}")
            time.sleep(0.25)
        yield url, proc
    finally:
        stop_process(proc)
        log.close()


def stop_process(proc) -> None:
    """Terminate a server subprocess; kill it if it has not exited within 20 s."""
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def limited_server(app, **limits):
    """`app` under uvicorn with the guarded protocol and ConnectionLimits(**limits), in a thread; yields its port."""
    import uvicorn

    from routedvlm.inference.serving.connections import ConnectionLimits, guarded_protocol

    cl = ConnectionLimits(**{"header_timeout": 10.0, "max_connections": 1000, **limits})
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", timeout_keep_alive=2,
                                           http=guarded_protocol(cl.header_timeout, cl.max_connections, cl)))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(600):
        if server.started:
            break
        time.sleep(0.05)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(60)
