"""Scale-out on the in-process vLLM engine: Ray actor pool (one engine per actor) vs Ray Data LLM, side by side.

Issue 29 ("many GPUs and nodes on an existing engine"): which of the two spreads labelling over a Ray cluster better.
Both run the SAME requests (the toy pair's `--model` side, one chat request per toy sample: its image as a data URL
and its question, the chat template with thinking on or off, greedy, `--max-tokens`) on the same local Ray cluster
with `--workers` engines:
  pool     `--workers` Ray actors, each loading one `vllm.LLM` once; the driver hands out units of `--unit` samples
           (ray.wait, the next unit to whichever actor returns; the mechanics of data/labelling/ray_pool.py) and each
           actor runs its whole unit through one `LLM.chat` call (the engine batches it);
  raydata  `ray.data.llm.build_processor(vLLMEngineProcessorConfig(concurrency=--workers, batch_size=--unit))` over
           a `ray.data.from_items` of the same rows (its chat-template, multimodal and detokenize stages included);
  label    (with --label) `routedvlm label --ray --num-workers W` on engine sides (`vllm:<folder>`): the whole
           strategy grid per sample through the batched labeller, each actor one engine per side (other work: it
           is reported in samples/s and requests are not comparable with the two above).
Reported per path: wall seconds end to end (engines loaded, all answers back; for the pool also engines stopped),
requests/s over that, the steady rate (requests/s from the first answers out to the last: engine start-up and the
first batch left out, the same measure on both paths), the ratios to the pool, and whether the answers equal the
pool's (for `label`: samples/s over its labelling, engine start-up excluded). The machine's load average is printed
before and after each path: on a shared machine only ratios from one run count.

    VLLM_TARGET_DEVICE=cpu VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind OMP_NUM_THREADS=1 \\
      HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 nice -n 5 .venv-vllm/bin/python benchmarks/bench_engine_scaleout.py
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import pathlib
import tempfile
import time
from collections import deque

ENGINE_KWARGS = dict(dtype="float32", max_model_len=2048, block_size=32, enable_prefix_caching=True,
                     enforce_eager=True, limit_mm_per_prompt={"image": 1, "video": 0}, max_num_seqs=16)


def _args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--samples", type=int, default=48, help="toy eval samples (one request each)")
    p.add_argument("--seed", type=int, default=29, help="toy split seed")
    p.add_argument("--model", choices=("small", "large"), default="small", help="toy side that answers")
    p.add_argument("--thinking", action=argparse.BooleanOptionalAction, default=True,
                   help="chat template with thinking on (the labeller's reasoning stage) or off (a direct answer)")
    p.add_argument("--max-tokens", type=int, default=48, help="max output tokens per request")
    p.add_argument("--workers", type=int, default=2, help="engines (Ray actors), one per core at most")
    p.add_argument("--unit", type=int, default=8, help="samples per unit (pool) / per batch (Ray Data)")
    p.add_argument("--paths", default="pool,raydata", help="which paths, in order (pool,raydata,label)")
    p.add_argument("--json", default=None, help="also write the numbers to this JSON file")
    return p.parse_args(argv)


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def _rows(args, workdir) -> tuple[list[dict], pathlib.Path]:
    """One row per toy sample (id, question, its PNG as a data URL) and the data set's path."""
    import pyarrow.parquet as pq

    from routedvlm.data.toyworld.make_labels import write_split

    path = write_split("eval", args.samples, args.seed, workdir)
    rows = [{"sample_id": str(rec["sample_id"]), "question": str(rec["question"]),
             "image_url": "data:image/png;base64," + base64.b64encode(rec["image"]).decode()}
            for rec in pq.read_table(path).to_pylist()]
    return rows, path


def _messages(row) -> list:
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": row["image_url"]}},
                                         {"type": "text", "text": row["question"]}]}]


def _sampling(args) -> dict:
    return dict(temperature=0.0, max_tokens=args.max_tokens, skip_special_tokens=False)


class PoolEngine:
    """One Ray actor of the pool path: one `vllm.LLM`, loaded once; `label(unit)` answers a whole unit in one call."""

    def __init__(self, model: str, engine_kwargs: dict, sampling: dict, thinking: bool):
        import vllm

        t0 = time.perf_counter()
        self.llm = vllm.LLM(model=model, **engine_kwargs)
        self.sampling, self.thinking = vllm.SamplingParams(**sampling), thinking
        self.load_s = time.perf_counter() - t0

    def hello(self) -> float:
        return self.load_s

    def label(self, unit: list) -> list:
        outs = self.llm.chat([_messages(r) for r in unit], self.sampling, use_tqdm=False,
                             chat_template_kwargs={"enable_thinking": self.thinking})
        return [(r["sample_id"], o.outputs[0].text, len(o.outputs[0].token_ids)) for r, o in zip(unit, outs)]

    def stop(self) -> None:
        self.llm.llm_engine.engine_core.shutdown()


def run_pool(ray, args, model, rows) -> dict:
    actor = ray.remote(num_cpus=1, max_restarts=0)(PoolEngine)
    t0 = time.perf_counter()
    engines = [actor.remote(model, ENGINE_KWARGS, _sampling(args), args.thinking) for _ in range(args.workers)]
    load_s = max(ray.get([e.hello.remote() for e in engines]))
    t1 = time.perf_counter()
    queue = deque(rows[i:i + args.unit] for i in range(0, len(rows), args.unit))
    running, answers, stamps = {}, {}, []
    for e in engines:
        if queue:
            running[e.label.remote(queue.popleft())] = e
    while running:
        ready, _ = ray.wait(list(running), num_returns=1)
        e = running.pop(ready[0])
        got = ray.get(ready[0])
        answers.update({sid: (text, n) for sid, text, n in got})
        stamps.append((time.perf_counter(), len(got)))
        if queue:
            running[e.label.remote(queue.popleft())] = e
    t2 = time.perf_counter()
    ray.get([e.stop.remote() for e in engines])
    for e in engines:
        ray.kill(e)
    t3 = time.perf_counter()
    return {"wall_s": t3 - t0, "load_s": t1 - t0, "engine_load_s": load_s, "generate_s": t2 - t1,
            "steady_req_per_s": _steady(stamps), "answers": answers}


def _steady(stamps) -> float | None:
    """Requests per second between the first answers out and the last (engine start-up and the first batch left
    out): the rate once the engines run, comparable between the two paths."""
    if len(stamps) < 2 or stamps[-1][0] <= stamps[0][0]:
        return None
    return sum(n for _, n in stamps[1:]) / (stamps[-1][0] - stamps[0][0])


def vllm_032_shim() -> None:
    """Ray 2.60's Ray Data LLM is written against vLLM 0.29 (`ray[llm]` pins vllm==0.29.0): its multimodal stage imports
    `vllm.entrypoints.chat_utils`, which vLLM 0.32 moved to `vllm.renderers.chat_utils` (same function, same
    signature). Every Ray worker of the raydata path gets this alias (a worker_process_setup_hook); it imports
    nothing until that module is asked for, so workers that never need vLLM do not pay for importing it."""
    import importlib
    import importlib.abc
    import importlib.util
    import sys

    class Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path, target=None):  # consulted only after the real finders found nothing
            return importlib.util.spec_from_loader(name, self) if name == "vllm.entrypoints.chat_utils" else None

        def create_module(self, spec):
            return importlib.import_module("vllm.renderers.chat_utils")

        def exec_module(self, module):
            pass

    sys.meta_path.append(Alias())


def run_raydata(ray, args, model, rows) -> dict:
    from ray.data.llm import build_processor, vLLMEngineProcessorConfig

    kwargs = {k: v for k, v in ENGINE_KWARGS.items()}
    small_stage = {"num_cpus": 0.25, "concurrency": 1, "batch_size": args.unit}
    config = vLLMEngineProcessorConfig(
        model_source=model, engine_kwargs=kwargs, concurrency=args.workers, batch_size=args.unit,
        placement_group_config={"bundles": [{"CPU": 1}]}, log_engine_metrics=False,
        chat_template_stage=small_stage, tokenize_stage=small_stage, detokenize_stage=small_stage,
        prepare_multimodal_stage={"enabled": True, **small_stage,
                                  "model_config_kwargs": {"model": model, "dtype": "float32", "max_model_len": 2048,
                                                          "limit_mm_per_prompt": {"image": 1, "video": 0}}})
    sampling = _sampling(args)
    processor = build_processor(
        config,
        preprocess=lambda row: dict(sample_id=row["sample_id"], messages=_messages(row), sampling_params=sampling),
        postprocess=lambda row: dict(sample_id=row["sample_id"], text=row["generated_text"],
                                     n=len(row["generated_tokens"])),
        preprocess_map_kwargs={"num_cpus": 0.25}, postprocess_map_kwargs={"num_cpus": 0.25},
        builder_kwargs=dict(chat_template_kwargs={"enable_thinking": args.thinking}),
    )
    t0, answers, stamps = time.perf_counter(), {}, []
    for batch in processor(ray.data.from_items(rows)).iter_batches(batch_size=None, batch_format="pandas"):
        stamps.append((time.perf_counter(), len(batch)))
        answers.update({sid: (text, int(n)) for sid, text, n in zip(batch["sample_id"], batch["text"], batch["n"])})
    t2 = time.perf_counter()
    return {"wall_s": t2 - t0, "first_row_s": (stamps[0][0] if stamps else t2) - t0,
            "steady_req_per_s": _steady(stamps), "answers": answers}


def run_label(args, dataset, workdir) -> dict:
    from routedvlm.data.labelling.job import run_labelling
    from routedvlm.data.toyworld.make_labels import checkpoint_pair, toy_label_config

    small, large = (f"vllm:{p}" for p in checkpoint_pair())
    out = pathlib.Path(workdir) / "label" / "labels.parquet"
    cfg = toy_label_config(dataset, out, small, large, progress=False, ray=True, num_workers=args.workers)
    t0 = time.perf_counter()
    summary = run_labelling(cfg)
    return {"wall_s": time.perf_counter() - t0, "generate_s": summary.label_seconds, "samples": summary.labelled_now,
            "errors": summary.errors, "answers": {}}


def main(argv=None) -> int:
    import ray

    from routedvlm.data.toyworld.make_labels import checkpoint_pair

    args = _args(argv)
    model = str(checkpoint_pair()[0 if args.model == "small" else 1])
    results, load_before = {}, _load()
    with tempfile.TemporaryDirectory(prefix="bench-scaleout-") as workdir:
        rows, dataset = _rows(args, workdir)
        for name in [p.strip() for p in args.paths.split(",") if p.strip()]:
            hook = {"runtime_env": {"worker_process_setup_hook": vllm_032_shim}} if name == "raydata" else {}
            ray.init(num_cpus=2 * args.workers, include_dashboard=False, log_to_driver=False, **hook)
            try:
                if name == "label":
                    results[name] = run_label(args, dataset, workdir)
                else:
                    results[name] = {"pool": run_pool, "raydata": run_raydata}[name](ray, args, model, rows)
            finally:
                ray.shutdown()
            results[name]["load_after"] = _load()
            print(name, {k: v for k, v in results[name].items() if k != "answers"}, flush=True)
    _report(args, results, load_before)
    return 0


def _report(args, results, load_before) -> None:
    n = args.samples
    base = results.get("pool") or next(iter(results.values()))
    print(f"\n{n} requests ({args.model}, thinking {'on' if args.thinking else 'off'}, max {args.max_tokens} tokens), "
          f"{args.workers} engines, units of {args.unit}; load before {load_before}")
    print(f"{'path':8} {'wall s':>8} {'req/s wall':>11} {'x pool':>7} {'gen s':>7} {'req/s steady':>13} {'x pool':>7} "
          "same answers")
    table = {}
    for name, r in results.items():
        per_s = n / r["wall_s"]
        gen = r.get("generate_s")
        same = (r["answers"] == base["answers"]) if r["answers"] and base["answers"] else None
        steady, base_steady = r.get("steady_req_per_s"), base.get("steady_req_per_s")
        x_steady = steady / base_steady if steady and base_steady else None
        table[name] = {"wall_s": round(r["wall_s"], 2), "req_per_s_wall": round(per_s, 3),
                       "steady_req_per_s": steady and round(steady, 3), "x_pool_steady": x_steady and round(x_steady, 3),
                       "x_pool_wall": round(base["wall_s"] / r["wall_s"], 3), "generate_s": gen and round(gen, 2),
                       "same_answers": same, **{k: round(v, 2) for k, v in r.items()
                                                if k in ("load_s", "engine_load_s", "first_row_s")},
                       "load_after": r["load_after"]}
        nan = float("nan")
        print(f"{name:8} {r['wall_s']:8.1f} {per_s:11.3f} {table[name]['x_pool_wall']:7.3f} {(gen or nan):7.1f} "
              f"{(steady or nan):13.3f} {(x_steady or nan):7.3f} {same}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"args": vars(args), "load_before": load_before,
                                                       "results": table}, indent=2))


if __name__ == "__main__":
    raise SystemExit(main())
