"""`routedvlm label` on in-process vLLM engines vs vLLM's own offline `LLM.generate` on the same requests, one run.

Both sides are `vllm:<folder>` engines of the toy pair (started once, shared by both measurements), warmed up by a
labelling of `--warmup` other samples. Per repetition, each measurement starting with both engines' prefix and
multimodal caches emptied:
1. labelling: `run_labelling` (what `routedvlm label` runs) on `--samples` toy `label`-split samples, every strategy
   (K grid 4, 8, 16 + all), `--concurrency` samples in flight; every request each engine answered is logged. Timed:
   the labelling loop (every sample through the engines, scored, featurized, stored as parts); the whole job (also
   opening the data and merging the parts into labels.parquet) is printed beside it;
2. the engines' own throughput on the same work, twice (their mean): the labelling's requests (same prompts, images,
   max/min tokens, greedy), less the labeller's measurement-only requests (the `large_prefix_seed` that gives each
   two-stage measurement its own cache namespace, and the cold one-stage repeats `large_transfer_cold`; with `--cost`
   the labeller sends neither: its sides are `priced`), as plain requests (text + image: no cache salt, no
   `multi_modal_uuids`), through `LLM.generate` in two waves per engine (the calls a sample can make at once: directs
   and reasoning; then what needs their outputs: reasoning answers and transfers), both engines at once;
3. every request the labeller sent replayed as sent (measurement-only ones included, with their cache salts and the
   image uuids the labeller computes once per sample): the labeller's orchestration alone.
Printed: samples/s of each, labelling as a fraction of the engine's (the goal: >= 0.8 on the work), how many of the
engine's answers (output token ids) equal the labelling's for the same request, and the load average; overall: the
medians over repetitions (the load of a shared machine drifts within seconds). `--cold on,off` alternates the
labeller with and without its cold one-stage repeats (off: what `--cost` does). Run in .venv-vllm:

    VLLM_TARGET_DEVICE=cpu VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind OMP_NUM_THREADS=1 \\
        .venv-vllm/bin/python benchmarks/bench_engine_labelling.py --samples 128 --concurrency 128 --cold off \\
        --cost docs/profile_qwen3vl_2b_4b_cpu.json
"""
from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time

MEASUREMENT_ONLY = ("large_prefix_seed", "large_transfer_cold")
# the plain request (what a user of LLM.generate sends): no cache namespace, and no image uuid (the labeller hashes each
# sample's image once and names it in `multi_modal_uuids`; plain LLM.generate hashes the pixels of every request)
PLAIN_DROPS = ("cache_salt", "multi_modal_uuids")
FIRST_WAVE = ("small_direct", "small_reason", "large_direct", "large_reason")


def _args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--samples", type=int, default=64, help="toy samples labelled per repetition")
    p.add_argument("--concurrency", type=int, default=64, help="samples in flight while labelling")
    p.add_argument("--repeats", type=int, default=2, help="repetitions (engine, labelling) alternated")
    p.add_argument("--warmup", type=int, default=None, help="samples of a warm-up labelling (other samples) before "
                   "the repetitions; default: --samples")
    p.add_argument("--max-num-seqs", type=int, default=128, help="vllm.LLM max_num_seqs of each engine")
    p.add_argument("--cost", default=None, help="label with --cost PROFILE (only the work's requests: no cold "
                   "one-stage repeats, no seeds), e.g. docs/profile_qwen3vl_2b_4b_cpu.json")
    p.add_argument("--cold", default="on,off", help="per repetition in turn: 'on' measures one-stage transfers cold "
                   "too (the labeller's default without --cost), 'off' does not (what --cost does); default on,off")
    return p.parse_args(argv)


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def _label(pipe, dataset, out, args, logs, cold: bool = True) -> tuple[float, int, float]:
    """(seconds of the labelling loop, samples labelled, seconds of the whole job: opening the data, the loop, and
    merging the parts into labels.parquet)."""
    from routedvlm.data.labelling.job import run_labelling
    from routedvlm.data.toyworld.make_labels import toy_label_config

    cfg = toy_label_config(dataset, out, f"vllm:{pipe.small.name}", f"vllm:{pipe.large.name}", progress=False,
                           concurrency=args.concurrency, flush_every=max(8, args.concurrency), cost=args.cost)
    for side, log in zip((pipe.small, pipe.large), logs):
        side.request_log, side.measure_cold, side.priced = log, cold and cfg.cost is None, cfg.cost is not None
    _reset(pipe)
    t0 = time.perf_counter()
    try:
        summary = run_labelling(cfg, pipe=pipe)
        whole = time.perf_counter() - t0
    finally:
        for side in (pipe.small, pipe.large):
            side.request_log = None
    if summary.errors:
        raise SystemExit(f"labelling failed on {summary.errors} samples: {summary.error_examples}")
    return summary.label_seconds, summary.labelled_now, whole


def _reset(pipe) -> None:
    """Empty both engines' prefix caches and multimodal caches: every measurement starts cold on the same terms."""
    for side in (pipe.small, pipe.large):
        side.driver.llm.reset_prefix_cache()
        side.driver.llm.reset_mm_cache()


def _waves(log, every: bool = False) -> list[list]:
    """One engine's logged requests as [(prompt, params, labelled output)] per wave. every=False: the work requests
    only, without cache salts; True: every request as sent (salts kept; the seeds go in the first wave)."""
    waves = [[], []]
    for stage, prompt, params, out in log:
        if stage in MEASUREMENT_ONLY and not every:
            continue
        sent = prompt if every else {k: v for k, v in prompt.items() if k not in PLAIN_DROPS}
        waves[0 if stage in FIRST_WAVE or stage == "large_prefix_seed" else 1].append((sent, params, out))
    return waves


def _engine(pipe, logs, every: bool = False) -> tuple[float, int, int]:
    """Seconds of the engines' own runs of the logged requests (`_waves`), and (equal, compared) answers."""
    per_side = [_waves(log, every) for log in logs]
    _reset(pipe)
    results, seconds = {}, 0.0
    for wave in (0, 1):
        def run(i, side):
            reqs = per_side[i][wave]
            if reqs:
                results[(i, wave)] = side.driver.llm.generate([r[0] for r in reqs], [r[1] for r in reqs], use_tqdm=False)

        t0 = time.perf_counter()
        threads = [threading.Thread(target=run, args=(i, side)) for i, side in enumerate((pipe.small, pipe.large))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds += time.perf_counter() - t0
    equal = total = 0
    for (i, wave), outs in results.items():
        for (_, _, labelled), mine in zip(per_side[i][wave], outs):
            total += 1
            equal += list(mine.outputs[0].token_ids) == list(labelled.outputs[0].token_ids)
    return seconds, equal, total


def main(argv=None) -> int:
    args = _args(argv)
    for name, value in (("VLLM_TARGET_DEVICE", "cpu"), ("VLLM_CPU_KVCACHE_SPACE", "1"),
                        ("VLLM_CPU_OMP_THREADS_BIND", "nobind"), ("VLLM_NO_USAGE_STATS", "1"), ("HF_HUB_OFFLINE", "1")):
        os.environ.setdefault(name, value)
    from routedvlm.data.toyworld.make_labels import (MAX_DIRECT_TOKENS, MAX_REASON_TOKENS, TOY_K_GRID, checkpoint_pair,
                                                     write_split)
    from routedvlm.inference import CollaborativePipeline
    from routedvlm.inference.sides.vllm.side import VLLMEngine

    work = tempfile.mkdtemp(prefix="bench-engine-")
    dataset = write_split("label", args.samples, 5, work)
    t0 = time.perf_counter()
    small, large = (VLLMEngine(str(p), engine_args={"max_num_seqs": args.max_num_seqs}) for p in checkpoint_pair())
    pipe = CollaborativePipeline(small, large, k_grid=TOY_K_GRID, max_direct_tokens=MAX_DIRECT_TOKENS,
                                 max_reason_tokens=MAX_REASON_TOKENS)
    pipe.start()  # both engines are built now, before the clock of the first measurement
    print(f"engines started in {time.perf_counter() - t0:.1f} s; {args.samples} samples, concurrency "
          f"{args.concurrency}, max_num_seqs {args.max_num_seqs}, cost {args.cost}")
    warm = args.warmup if args.warmup is not None else args.samples  # other samples: the engines' caches stay cold
    _label(pipe, write_split("label", warm, 99, work + "/warm"), f"{work}/warm.parquet", args, ([], []))
    rows, colds = [], [c.strip() == "on" for c in args.cold.split(",")]
    for rep in range(args.repeats):
        logs, cold = ([], []), colds[rep % len(colds)]
        load0 = _load()
        label_s, n, whole_s = _label(pipe, dataset, f"{work}/labels-{rep}.parquet", args, logs, cold)
        first_s, equal, total = _engine(pipe, logs)  # twice, right after the labelling (their mean): the load of
        second_s = _engine(pipe, logs)[0]            # this shared machine drifts within seconds
        engine_s = (first_s + second_s) / 2
        sent_s, sent_equal, sent_total = _engine(pipe, logs, every=True)
        work_reqs = sum(len(w) for log in logs for w in _waves(log))
        rows.append((label_s, engine_s, sent_s, cold, whole_s))
        print(f"rep {rep} (cold repeats {'on' if cold else 'off'}): labelling {n / label_s:.3f} samples/s "
              f"({label_s:.1f} s, {sum(map(len, logs))} requests); engine on the work {n / engine_s:.3f} samples/s "
              f"({engine_s:.1f} s, {work_reqs} requests): ratio {engine_s / label_s:.3f}, answers equal {equal}/{total}; "
              f"engine on every request sent {n / sent_s:.3f} samples/s ({sent_s:.1f} s): ratio {sent_s / label_s:.3f}, "
              f"answers equal {sent_equal}/{sent_total}; whole job (data, loop, merge) {whole_s:.1f} s: ratio "
              f"{engine_s / whole_s:.3f}; load {load0} -> {_load()}")
    import statistics

    for cold in sorted({r[3] for r in rows}, reverse=True):
        mine = [r for r in rows if r[3] == cold]
        work_ratio = statistics.median(r[1] / r[0] for r in mine)
        sent_ratio = statistics.median(r[2] / r[0] for r in mine)
        whole_ratio = statistics.median(r[1] / r[4] for r in mine)
        print(f"overall, cold repeats {'on' if cold else 'off'} ({len(mine)} repetitions, median): labelling / engine "
              f"throughput = {work_ratio:.3f} on the work (goal >= 0.8), {sent_ratio:.3f} on every request sent; "
              f"the whole job / engine on the work {whole_ratio:.3f}")
    pipe.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
