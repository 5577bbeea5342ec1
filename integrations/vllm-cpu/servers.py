"""Start / stop the vLLM OpenAI servers on the toy ladder (`make vllm-up` / `make vllm-down`). Standard library only.

up:   small on 127.0.0.1:$VLLM_PORT_SMALL (default 8102) as model `toy-small`, mid on $VLLM_PORT_MID (8103) as
      `toy-mid`, large on $VLLM_PORT_LARGE (8101) as `toy-large`, all with prefix caching, prompt-token details and
      32-token KV blocks; the small and mid ones also run vLLM's qwen3 reasoning parser and the large one none, so
      the servers cover both reply shapes (the pair small + large is the two-model setup). Each
      server is its own process group; its PID goes to runs/vllm/<name>.pid and its log to runs/vllm/<name>.log.
      "Up" means it answered a real chat request (an image + a question), not just /health: the CPU build reports
      healthy and dies on the first request when the model's head size is not one it supports.
down: stops exactly the process groups of those PID files (after checking that each PID is still a vLLM server).
Example: python3 integrations/vllm-cpu/servers.py up --timeout 900
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import pathlib
import signal
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
RUN_DIR = pathlib.Path(os.environ.get("VLLM_RUN_DIR", ROOT / "runs" / "vllm"))
CKPT = ROOT / "data" / "toyworld" / "checkpoints"
SERVERS = {  # name: (checkpoint, port variable, default port, served model id, reasoning parser)
    "large": ("large", "VLLM_PORT_LARGE", 8101, "toy-large", None),
    "small": ("small", "VLLM_PORT_SMALL", 8102, "toy-small", "qwen3"),
    "mid": ("mid", "VLLM_PORT_MID", 8103, "toy-mid", "qwen3"),
}
ENV = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
       "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
       "TOKENIZERS_PARALLELISM": "false"}


def port(name: str) -> int:
    _, var, default, _, _ = SERVERS[name]
    return int(os.environ.get(var, default))


def command(name: str, venv: pathlib.Path) -> list[str]:
    ckpt, _, _, model_id, parser = SERVERS[name]
    cmd = [str(venv / "bin" / "vllm"), "serve", str(CKPT / ckpt), "--served-model-name", model_id,
           "--host", "127.0.0.1", "--port", str(port(name)), "--enable-prefix-caching",
           "--enable-prompt-tokens-details", "--block-size", "32", "--max-model-len", "2048", "--dtype", "float32",
           "--max-num-seqs", os.environ.get("VLLM_MAX_NUM_SEQS", "16"), "--enforce-eager",
           "--limit-mm-per-prompt", json.dumps({"image": 1, "video": 0}), "--disable-uvicorn-access-log"]
    return cmd + (["--reasoning-parser", parser] if parser else [])


def toy_png() -> str:
    """A 96x16 RGB PNG (one red and one blue bar) as a data URL, written with zlib alone."""
    rows = []
    for y in range(16):
        row = bytearray([0])
        for x in range(96):
            red = 4 <= x < 12 and y >= 8
            blue = 20 <= x < 28 and y >= 4
            row += bytes((220, 30, 30) if red else (30, 30, 220) if blue else (255, 255, 255))
        rows.append(bytes(row))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 96, 16, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(b"".join(rows))) + chunk(b"IEND", b""))
    return "data:image/png;base64," + base64.b64encode(png).decode()


def chat_once(name: str, timeout: float = 60.0) -> str:
    """One real chat completion (image + question) against a server; returns the answer text."""
    model_id = SERVERS[name][3]
    body = {"model": model_id, "max_tokens": 8, "temperature": 0, "chat_template_kwargs": {"enable_thinking": False},
            "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": toy_png()}},
                                                      {"type": "text", "text": "2 bars. Red sum times blue count?"}]}]}
    req = urllib.request.Request(f"http://127.0.0.1:{port(name)}/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.load(resp)["choices"][0]["message"]["content"]


def _tail(path: pathlib.Path, n: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-n:]) if path.exists() else "(no log)"


def _alive(pid: int) -> bool:
    try:
        status = pathlib.Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status  # a zombie has exited


def _is_vllm(pid: int) -> bool:
    try:
        return b"vllm" in pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def start(name: str, venv: pathlib.Path) -> subprocess.Popen:
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    log = open(RUN_DIR / f"{name}.log", "w")
    proc = subprocess.Popen(command(name, venv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env={**os.environ, **ENV}, start_new_session=True, cwd=ROOT)
    (RUN_DIR / f"{name}.pid").write_text(f"{proc.pid}\n")
    print(f"vllm-up: {name} starting (pid {proc.pid}, port {port(name)}, log {RUN_DIR / f'{name}.log'})", flush=True)
    return proc


def wait_ready(name: str, proc: subprocess.Popen, deadline: float) -> None:
    log = RUN_DIR / f"{name}.log"
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the {name} vLLM server exited with code {proc.returncode}; its log ends:\n{_tail(log)}")
        try:
            answer = chat_once(name, timeout=30)
            print(f"vllm-up: {name} answered a chat request on port {port(name)} ({answer!r})", flush=True)
            return
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError, KeyError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the {name} vLLM server did not answer a chat request in time; its log ends:\n{_tail(log)}")
        time.sleep(2)


def up(venv: pathlib.Path, timeout: float) -> int:
    if not (venv / "bin" / "vllm").exists():
        print(f"error: {venv / 'bin' / 'vllm'} is missing; run `make vllm-env` first", file=sys.stderr)
        return 2
    down(quiet=True)
    t0, procs = time.monotonic(), {name: start(name, venv) for name in SERVERS}
    try:
        for name, proc in procs.items():
            wait_ready(name, proc, t0 + timeout)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        down()
        return 1
    print(f"vllm-up: all {len(procs)} servers ({', '.join(procs)}) answer after {time.monotonic() - t0:.0f} s; stop "
          "them with `make vllm-down`")
    return 0


def down(quiet: bool = False) -> int:
    for name in SERVERS:
        pid_file = RUN_DIR / f"{name}.pid"
        if not pid_file.exists():
            continue
        pid = int(pid_file.read_text().strip())
        if _alive(pid) and _is_vllm(pid):
            os.killpg(pid, signal.SIGTERM)  # the server and its engine processes: one process group
            for _ in range(100):
                if not _alive(pid):
                    break
                time.sleep(0.2)
            else:
                os.killpg(pid, signal.SIGKILL)
            if not quiet:
                print(f"vllm-down: stopped {name} (pid {pid})")
        try:
            os.killpg(pid, 0)
            os.killpg(pid, signal.SIGKILL)  # engine children left behind by a server that died first
        except OSError:
            pass
        pid_file.unlink()
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Start or stop the toy ladder's vLLM servers.", epilog=__doc__.split("\n")[-2])
    p.add_argument("action", choices=["down", "up"])
    p.add_argument("--venv", default=os.environ.get("VLLM_VENV", str(ROOT / ".venv-vllm")))
    p.add_argument("--timeout", type=float, default=float(os.environ.get("VLLM_UP_TIMEOUT", 900)),
                   help="seconds to wait for every server to answer (default 900)")
    args = p.parse_args(argv)
    return up(pathlib.Path(args.venv), args.timeout) if args.action == "up" else down()


if __name__ == "__main__":
    raise SystemExit(main())
