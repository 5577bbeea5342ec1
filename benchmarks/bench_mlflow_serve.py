"""Seconds from `mlflow models serve` to its first /ping answer (and one /invocations answer) per env manager.

Run after a router is registered (`make demo`, or train-router without --no-register), from the folder holding
./mlruns:
    .venv/bin/python benchmarks/bench_mlflow_serve.py --env-manager local
    .venv/bin/python benchmarks/bench_mlflow_serve.py --env-manager uv --env-root /tmp/mlflow-envs   # uv on PATH
The local manager runs uvicorn from PATH, so this puts the interpreter's bin folder first. virtualenv and uv build
(the first time) an environment from the model's requirements.txt under --env-root.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _features(model_uri: str) -> list[str]:
    import mlflow

    return mlflow.models.get_model_info(model_uri).signature.inputs.input_names()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-uri", default="models:/vlm-router@champion")
    p.add_argument("--env-manager", default="local", choices=["local", "virtualenv", "uv", "conda"])
    p.add_argument("--tracking-uri", default=f"sqlite:///{Path.cwd() / 'mlruns' / 'mlflow.db'}")
    p.add_argument("--env-root", default=None, help="MLFLOW_ENV_ROOT: where virtualenv / uv environments go")
    p.add_argument("--timeout", type=float, default=1800.0)
    args = p.parse_args(argv)
    os.environ["MLFLOW_TRACKING_URI"] = args.tracking_uri
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    if args.env_root:
        env["MLFLOW_ENV_ROOT"] = args.env_root
    port, url = _free_port(), None
    cmd = [sys.executable, "-m", "mlflow", "models", "serve", "-m", args.model_uri, "--env-manager", args.env_manager,
           "--host", "127.0.0.1", "--port", str(port)]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        while time.monotonic() - t0 < args.timeout and proc.poll() is None:
            try:
                urllib.request.urlopen(f"{url}/ping", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        ready = time.monotonic() - t0
        body = json.dumps({"dataframe_records": [{f: 0.0 for f in _features(args.model_uri)}]}).encode()
        req = urllib.request.Request(f"{url}/invocations", data=body, headers={"content-type": "application/json"})
        answer = json.loads(urllib.request.urlopen(req, timeout=60).read())
        print(json.dumps({"env_manager": args.env_manager, "seconds_to_ping": round(ready, 1),
                          "load_average": os.getloadavg()[0], "answer": answer["predictions"][0]}))
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
