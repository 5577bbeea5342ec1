"""`routedvlm serve` in front of vLLM: throughput of the same vLLM servers driven directly vs through serve, side by side.

Starts two vLLM CPU servers (the toy small and large checkpoints, the settings of integrations/vllm-cpu/servers.py, with
`--max-num-seqs` as given) and one `routedvlm serve` whose sides are those servers (`<url>#<model>`), with the given
router for its routed model. Then, per concurrency, `vllm bench serve` (the vLLM environment's own load generator,
its default backend: streamed POST /v1/completions; random prompts of the toy tokenizer, `--ignore-eos` so every
request decodes exactly its output length) runs the same prompts against:
1. `direct`: the large vLLM server itself (model `toy-large`);
2. `passthrough`: serve's plain model `large` (one call of the large server per request);
3. `routed`: serve's routed model (the prompt as the question: the router's mix of small and large calls);
directs and passthroughs alternate for `--rounds` rounds, after one unmeasured warm-up run through serve per
concurrency (serve starts its worker threads and their connections then). Printed: completed/failed requests,
requests/s, output tokens/s, median TTFT, serve's own CPU time per request (from /proc), and the passthrough / direct
throughput ratio per round and its median. The routed model's
throughput is its own number (it runs more calls per request by design), reported beside.

Needs `make vllm-env`. Keep it short on a small CPU (small output lengths, a few hundred prompts).
Example: .venv/bin/python benchmarks/bench_serve_throughput.py --concurrency 64,256 --prompts 512 --rounds 2
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_affinity import servers_module, wait_http  # the same vLLM-CPU servers and readiness wait

ROOT = Path(__file__).resolve().parents[1]
PORTS = {"large": 8151, "small": 8152, "serve": 8160}
MODEL_IDS = {"large": "toy-large", "small": "toy-small"}


def vllm_command(servers, name: str, venv: Path, max_num_seqs: int) -> list[str]:
    os.environ["VLLM_MAX_NUM_SEQS"] = str(max_num_seqs)
    cmd = servers.command(name, venv)
    cmd[cmd.index("--port") + 1] = str(PORTS[name])
    return cmd


def serve_command(router: str, max_queued: int) -> list[str]:
    url = "http://127.0.0.1:{}/v1#{}"
    return [str(ROOT / ".venv" / "bin" / "routedvlm"), "serve", "--small", url.format(PORTS["small"], "toy-small"),
            "--large", url.format(PORTS["large"], "toy-large"), "--router", router, "--port", str(PORTS["serve"]),
            "--max-queued", str(max_queued), "--max-connections", str(2 * max_queued + 64),
            "--max-connections-per-client", "0", "--request-timeout", "600", "--log-level", "warning"]


def bench(args, venv: Path, port: int, model: str, concurrency: int, out_dir: Path, tag: str,
          prompts: int | None = None) -> dict:
    """One `vllm bench serve` run (default backend); its saved result JSON."""
    name = f"{tag}.json"
    cmd = [str(venv / "bin" / "vllm"), "bench", "serve", "--base-url", f"http://127.0.0.1:{port}",
           "--model", str(ROOT / "data" / "toyworld" / "checkpoints" / "large"), "--served-model-name", model,
           "--dataset-name", "random", "--random-input-len", str(args.input_len), "--random-output-len",
           str(args.output_len), "--num-prompts", str(prompts or args.prompts), "--max-concurrency", str(concurrency),
           "--ignore-eos", "--seed", str(args.seed), "--disable-tqdm", "--save-result", "--result-dir", str(out_dir),
           "--result-filename", name, "--ready-check-timeout-sec", "0"]
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
           "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.run_timeout)
    if done.returncode != 0 or not (out_dir / name).exists():
        raise SystemExit(f"error: vllm bench serve ({tag}) failed with {done.returncode}:\n{done.stdout[-3000:]}\n"
                         f"{done.stderr[-3000:]}")
    return json.loads((out_dir / name).read_text())


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def row(tag: str, res: dict, ratio: str = "", cpu_ms: str = "") -> str:
    failed = res.get("failed", "?")
    return (f"| {tag} | {res['completed']} | {failed} | {res['request_throughput']:.2f} | "
            f"{res['output_throughput']:.1f} | {res['median_ttft_ms']:.0f} | {cpu_ms} | {ratio} |")


def run(args, venv: Path, out_dir: Path, serve_pid: int) -> int:
    load0 = os.getloadavg()[0]
    print(f"vllm bench serve (default backend: streamed /v1/completions), random prompts of {args.input_len} tokens, "
          f"{args.output_len} output tokens (--ignore-eos), {args.prompts} prompts per run; vLLM --max-num-seqs "
          f"{args.max_num_seqs}; serve's router {args.router!r}; load average at start {load0:.1f}\n")
    print("| run | completed | failed | requests/s | output tokens/s | median TTFT ms | serve CPU ms / request | "
          "passthrough / direct |")
    print("|---|---|---|---|---|---|---|---|")
    summary = {}
    for conc in args.concurrency:
        ratios = []
        bench(args, venv, PORTS["serve"], "large", conc, out_dir, f"warmup-c{conc}", prompts=conc)
        for r in range(args.rounds):
            order = ("direct", "passthrough") if r % 2 == 0 else ("passthrough", "direct")
            got, cpu = {}, {}
            for which in order:
                port, model = (PORTS["large"], "toy-large") if which == "direct" else (PORTS["serve"], "large")
                t0 = cpu_seconds(serve_pid)
                got[which] = bench(args, venv, port, model, conc, out_dir, f"{which}-c{conc}-r{r}")
                cpu[which] = 1000 * (cpu_seconds(serve_pid) - t0) / max(got[which]["completed"], 1)
            ratio = got["passthrough"]["output_throughput"] / max(got["direct"]["output_throughput"], 1e-9)
            ratios.append(ratio)
            print(row(f"direct, concurrency {conc}, round {r}", got["direct"]), flush=True)
            print(row(f"passthrough, concurrency {conc}, round {r}", got["passthrough"], f"{ratio:.3f}",
                      f"{cpu['passthrough']:.2f}"), flush=True)
        t0 = cpu_seconds(serve_pid)
        routed = bench(args, venv, PORTS["serve"], "routedvlm", conc, out_dir, f"routed-c{conc}")
        cpu_routed = 1000 * (cpu_seconds(serve_pid) - t0) / max(routed["completed"], 1)
        print(row(f"routed ({args.router}), concurrency {conc}", routed, "", f"{cpu_routed:.2f}"), flush=True)
        summary[conc] = (statistics.median(ratios), routed)
    load1 = os.getloadavg()[0]
    print(f"\nload average at end {load1:.1f}")
    for conc, (ratio, routed) in summary.items():
        print(f"concurrency {conc}: passthrough / direct output throughput, median of {args.rounds}: {ratio:.3f}; "
              f"routed model {routed['request_throughput']:.2f} requests/s")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__.split("\n")[-2])
    p.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[64, 256],
                   help="comma-separated concurrency levels (default 64,256)")
    p.add_argument("--prompts", type=int, default=512, help="prompts per run")
    p.add_argument("--rounds", type=int, default=2, help="direct/passthrough pairs per concurrency")
    p.add_argument("--input-len", type=int, default=32)
    p.add_argument("--output-len", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--router", default="mutual-verification", help="serve's --router for the routed model")
    p.add_argument("--max-num-seqs", type=int, default=256, help="vLLM servers' --max-num-seqs")
    p.add_argument("--venv", default=os.environ.get("VLLM_VENV", str(ROOT / ".venv-vllm")))
    p.add_argument("--timeout", type=float, default=900, help="seconds for the servers to come up")
    p.add_argument("--run-timeout", type=float, default=900, help="seconds for one vllm bench serve run")
    args = p.parse_args(argv)
    venv = Path(args.venv)
    if not (venv / "bin" / "vllm").exists():
        print(f"error: {venv / 'bin' / 'vllm'} is missing; run `make vllm-env` first", file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    servers, logs, procs = servers_module(), ROOT / "runs" / "bench-serve-throughput", []
    logs.mkdir(parents=True, exist_ok=True)
    try:
        deadline = time.monotonic() + args.timeout
        for name in ("large", "small"):
            log = logs / f"{name}.log"
            procs.append((subprocess.Popen(vllm_command(servers, name, venv, args.max_num_seqs), stdout=open(log, "w"),
                                           stderr=subprocess.STDOUT, env={**os.environ, **servers.ENV},
                                           start_new_session=True), log, name))
        for proc, log, name in list(procs):
            wait_http(f"http://127.0.0.1:{PORTS[name]}/health", proc, log, deadline)
        log = logs / "serve.log"
        env = {**os.environ, "OMP_NUM_THREADS": "1", "ROUTEDVLM_REQUIRE_PREFIX_CACHE": "0"}
        procs.append((subprocess.Popen(serve_command(args.router, max(1024, 2 * max(args.concurrency))),
                                       stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env,
                                       start_new_session=True), log, "serve"))
        wait_http(f"http://127.0.0.1:{PORTS['serve']}/ready", procs[-1][0], log, deadline)
        with tempfile.TemporaryDirectory() as tmp:
            return run(args, venv, Path(tmp), procs[-1][0].pid)
    finally:
        for proc, _, _ in procs:  # each its own process group (a vLLM server and its engine processes)
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except OSError:
                pass
        for proc, _, _ in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


if __name__ == "__main__":
    raise SystemExit(main())
