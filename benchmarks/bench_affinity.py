"""Escalation affinity across vLLM replicas: vllm-router's consistent_hash (hashing routedvlm's session header) vs
round_robin, side by side in one run, on the same two replicas of the toy large model (and one small).

Starts two vLLM CPU servers of the toy large checkpoint and one of the small one (the settings of
integrations/vllm-cpu/servers.py), and two vllm-router processes in front of the two large replicas: one with
`--policy consistent_hash`, one with `--policy round_robin`. Then, for N fresh toy samples per policy (never served
before: `cached_tokens` counts only this request's own reuse; the policies alternate, sample by sample), a RoutedVLM
whose cascade router always escalates (`large_direct`, then `transfer_<K>` continuing the large model's cached
image+question prefix) answers through each router. routedvlm sends the request id as `x-session-id` on both large
calls (sides/http/side.py). Printed per policy: the share of escalations whose call the engine reports reusing cached
prompt tokens (`usage.prompt_tokens_details.cached_tokens` > 0), the mean cached tokens, and the escalation call's
median latency; then the ratio.

Needs the vLLM environment (`make vllm-env`) with vllm-router installed in it
(`.venv-vllm/bin/pip install vllm-router==0.1.17`). Takes a few minutes of server start on a CPU.
Example: .venv/bin/python benchmarks/bench_affinity.py --samples 40
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PORTS = {"large-a": 8131, "large-b": 8132, "small": 8133, "hash": 8141, "rr": 8142}
POLICIES = {"hash": "consistent_hash", "rr": "round_robin"}


def servers_module():
    spec = importlib.util.spec_from_file_location("vllm_servers", ROOT / "integrations" / "vllm-cpu" / "servers.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def vllm_command(servers, name: str, venv: Path) -> list[str]:
    """servers.py's command for the toy `large` / `small` server, on this benchmark's port."""
    cmd = servers.command("large" if name.startswith("large") else "small", venv)
    cmd[cmd.index("--port") + 1] = str(PORTS[name])
    return cmd


def router_command(router_bin: str, name: str) -> list[str]:
    workers = [f"http://127.0.0.1:{PORTS[r]}" for r in ("large-a", "large-b")]
    return [router_bin, "--host", "127.0.0.1", "--port", str(PORTS[name]), "--policy", POLICIES[name],
            "--prometheus-port", str(PORTS[name] + 20000), "--worker-urls", *workers]  # each its own metrics port


def wait_http(url: str, proc, log: Path, deadline: float) -> None:
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"error: {proc.args[0]} exited with {proc.returncode}; its log ends:\n"
                             + "\n".join(log.read_text(errors="replace").splitlines()[-30:]))
        try:
            with urllib.request.urlopen(url, timeout=10):
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"error: {url} did not answer in time; see {log}")
        time.sleep(2)


class Always:
    """The cascade router of this benchmark: pays `large_direct`, then always escalates with transfer_<K>."""

    @staticmethod
    def make(keep: int):
        import numpy as np
        import pandas as pd

        from routedvlm.router import Policy, Router

        strategy = f"transfer_{keep}"

        class AlwaysEscalate(Router):
            def predict_proba(self, features):
                return pd.DataFrame({strategy: np.ones(len(features))}, index=features.index)

        return AlwaysEscalate(Policy(router_type="bench-always-escalate", mode="cascade", strategies=[strategy],
                                     paid_stages=["large_direct"], features=[], fallback=strategy))


def escalation(trace) -> dict:
    """The escalation call's record: the large model continuing its cached image+question prefix."""
    return next(r for r in trace if r.get("stage") == "escalate")


def run(args) -> int:
    from routedvlm.data.toyworld.make_labels import MAX_DIRECT_TOKENS, MAX_REASON_TOKENS
    from routedvlm.data.toyworld.task import make_samples
    from routedvlm.inference import CollaborativePipeline, RoutedVLM
    from routedvlm.inference.sides.http.side import OpenAIVLM

    def connect(name: str, model: str):  # round-robin escalations report no reuse: count them, do not raise
        return OpenAIVLM.connect(f"http://127.0.0.1:{PORTS[name]}/v1", model, require_prefix_cache=False)

    small = connect("small", "toy-small")
    routed = {}
    for name in POLICIES:
        large = connect(name, "toy-large")
        pipe = CollaborativePipeline(small, large, selector="prefix", k_grid=[args.keep],
                                     max_direct_tokens=MAX_DIRECT_TOKENS, max_reason_tokens=MAX_REASON_TOKENS)
        routed[name] = RoutedVLM(pipe, Always.make(args.keep), prompt_template="none")
    seed = args.seed if args.seed is not None else int(time.time()) % 100_000
    samples = make_samples("eval", 2 * args.samples, seed=seed)  # fresh per policy: no sample is served twice
    rows = {name: {"reused": 0, "cached": [], "ms": []} for name in POLICIES}
    for i in range(args.samples):
        order = list(POLICIES) if i % 2 == 0 else list(POLICIES)[::-1]
        for j, name in enumerate(order):
            smp = samples[2 * i + j]
            out = routed[name].generate(image=smp.image, question=smp.question)
            rec = escalation(out.trace)
            rows[name]["reused"] += rec["cached_tokens"] > 0
            rows[name]["cached"].append(rec["cached_tokens"])
            rows[name]["ms"].append(rec["vision_ms"] + rec["prefill_ms"] + rec["decode_ms"])
    load = os.getloadavg()
    print(f"toy eval split, {args.samples} fresh samples per policy (seed {seed}), transfer_{args.keep} escalations; "
          f"2 vLLM CPU replicas of toy-large behind vllm-router; load average {load[0]:.1f}\n")
    print("| policy | escalations reusing cached prefix | mean cached tokens | escalation call ms (median) |")
    print("|---|---|---|---|")
    for name, row in rows.items():
        print(f"| {POLICIES[name]} | {row['reused']}/{args.samples} ({100 * row['reused'] / args.samples:.0f} %) | "
              f"{statistics.mean(row['cached']):.1f} | {statistics.median(row['ms']):.0f} |")
    ratio = statistics.median(rows["rr"]["ms"]) / max(statistics.median(rows["hash"]["ms"]), 1e-9)
    print(f"\nround_robin / consistent_hash escalation latency (median): {ratio:.2f}x")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__.split("\n")[-2])
    p.add_argument("--samples", type=int, default=40, help="fresh samples per policy")
    p.add_argument("--keep", type=int, default=8, help="K of the escalation's transfer_<K>")
    p.add_argument("--seed", type=int, default=None, help="eval seed (default: from the clock, unseen prompts)")
    p.add_argument("--venv", default=os.environ.get("VLLM_VENV", str(ROOT / ".venv-vllm")))
    p.add_argument("--router-bin", default=None, help="vllm-router executable (default: <venv>/bin/vllm-router)")
    p.add_argument("--timeout", type=float, default=900, help="seconds for the servers to come up")
    args = p.parse_args(argv)
    venv = Path(args.venv)
    router_bin = args.router_bin or str(venv / "bin" / "vllm-router")
    for need, fix in ((venv / "bin" / "vllm", "make vllm-env"), (Path(router_bin), f"{venv}/bin/pip install vllm-router==0.1.17")):
        if not Path(need).exists():
            print(f"error: {need} is missing; run `{fix}` first", file=sys.stderr)
            return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    servers, logs, procs = servers_module(), ROOT / "runs" / "bench-affinity", []
    logs.mkdir(parents=True, exist_ok=True)
    try:
        deadline = time.monotonic() + args.timeout
        for name in ("large-a", "large-b", "small"):
            log = logs / f"{name}.log"
            procs.append((subprocess.Popen(vllm_command(servers, name, venv), stdout=open(log, "w"), stderr=subprocess.STDOUT,
                                           env={**os.environ, **servers.ENV}, start_new_session=True), log, name))
        for proc, log, name in list(procs):
            wait_http(f"http://127.0.0.1:{PORTS[name]}/health", proc, log, deadline)
        for name in POLICIES:
            log = logs / f"router-{name}.log"
            procs.append((subprocess.Popen(router_command(router_bin, name), stdout=open(log, "w"),
                                           stderr=subprocess.STDOUT, start_new_session=True), log, name))
            wait_http(f"http://127.0.0.1:{PORTS[name]}/health", procs[-1][0], log, deadline)
        return run(args)
    finally:
        for proc, _, _ in procs:
            proc.terminate()
        for proc, _, _ in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    raise SystemExit(main())
