"""Local transformers backend vs real vLLM servers on the toy pair: per-strategy answer agreement and reused tokens.

Needs `make vllm-env vllm-up` (ports from $VLLM_PORT_SMALL / $VLLM_PORT_LARGE). For N toy `eval` samples it runs every
strategy with `run_many` (the labeller's path) on both backends, then `large_direct` + `escalate` over vLLM (the
runtime's two-stage path), and prints a markdown table: answers equal, the large model's prompt tokens and how many
of them the server reported cached (`usage.prompt_tokens_details.cached_tokens`), and the wall time over HTTP.
Example: .venv/bin/python benchmarks/bench_vllm_agreement.py --n 20
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

STRATEGIES = ["small_direct", "large_direct", "small_reason", "large_reason", "transfer_4", "transfer_8", "transfer_16",
              "transfer_all"]


def _large_call(trace):
    calls = [r for r in trace if r["model"] == "large" and r["stage"] not in ("large_prefix", "large_branch")]
    return calls[-1] if calls else None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=20)
    p.add_argument("--seed", type=int, default=None, help="eval seed (default: from the clock, unseen prompts)")
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from routedvlm.data.toyworld.make_labels import MAX_DIRECT_TOKENS, MAX_REASON_TOKENS, TOY_K_GRID, checkpoint_pair
    from routedvlm.data.toyworld.task import make_samples
    from routedvlm.inference import VLM, CollaborativePipeline
    from routedvlm.inference.sides import load_side as connect

    kw = dict(selector="prefix", k_grid=TOY_K_GRID, max_direct_tokens=MAX_DIRECT_TOKENS, max_reason_tokens=MAX_REASON_TOKENS)
    small, large = checkpoint_pair()
    local = CollaborativePipeline(VLM.from_pretrained(small), VLM.from_pretrained(large), **kw)
    ports = os.environ.get("VLLM_PORT_SMALL", "8102"), os.environ.get("VLLM_PORT_LARGE", "8101")
    remote = CollaborativePipeline(connect(f"http://127.0.0.1:{ports[0]}/v1#toy-small"),
                                   connect(f"http://127.0.0.1:{ports[1]}/v1#toy-large"), **kw)
    seed = args.seed if args.seed is not None else int(time.time()) % 100_000
    rows = {s: {"equal": 0, "prompt": [], "cached": [], "ms": []} for s in [*STRATEGIES, "escalate_8"]}
    for smp in make_samples("eval", args.n, seed=seed):
        a, b = local.run_many(smp.image, smp.question, STRATEGIES), remote.run_many(smp.image, smp.question, STRATEGIES)
        first = remote.run(smp.image, smp.question, "large_direct")
        b["escalate_8"], a["escalate_8"] = remote.escalate(first, 8), a["transfer_8"]
        for s, row in rows.items():
            row["equal"] += a[s].answer == b[s].answer
            call = _large_call(b[s].trace)
            if call is not None:
                row["prompt"].append(call["prefill_tokens"] + call["cached_tokens"])
                row["cached"].append(call["cached_tokens"])
            row["ms"].append(b[s].latency_ms)
    print(f"toy eval split, {args.n} samples (seed {seed}); local transformers vs vLLM 0.32.0 CPU servers\n")
    print("| strategy | answers equal | large prompt tokens | of them cached | vLLM ms (HTTP, mean) |")
    print("|---|---|---|---|---|")
    for s, row in rows.items():
        mean = (lambda v: f"{statistics.mean(v):.1f}" if v else "-")
        print(f"| {s} | {row['equal']}/{args.n} | {mean(row['prompt'])} | {mean(row['cached'])} | {mean(row['ms'])} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
