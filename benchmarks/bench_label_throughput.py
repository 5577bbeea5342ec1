"""Samples/s of `routedvlm label` against the two vLLM servers of the toy pair at several concurrencies, and the Ray
runner with two workers vs one, side by side in one run; answers compared.

Labels the same `--samples` toy `label`-split samples (toy settings: K grid 4, 8, 16 + all) once per setting, each
into a fresh output, with the labeller's own code (`LabelConfig` + `run_labelling`, what `routedvlm label` runs):
1. `--concurrency` 1, 8, 32 against the servers (`make vllm-up`; `--small` / `--large` as `<base_url>#<model id>`);
2. `--ray --num-workers 1` and `2` (one pipeline per worker; `--ray-sides local`: the shipped toy checkpoints, one
   torch thread each, the shape of one model replica per GPU; `remote`: the same servers, one sample per worker).
Reported per setting: samples/s over the labelling (model loading and cluster start-up excluded), the speed-up over
the first setting of its group, and whether answers, correctness and output tokens equal the first setting's for
every sample. The machine's load average is printed with the numbers: on a shared machine only the ratios count.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_label_throughput.py --samples 64
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import tempfile
import time


def _args(argv=None):
    small = f"http://127.0.0.1:{os.environ.get('VLLM_PORT_SMALL', '8112')}/v1#toy-small"
    large = f"http://127.0.0.1:{os.environ.get('VLLM_PORT_LARGE', '8111')}/v1#toy-large"
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--samples", type=int, default=64, help="toy samples labelled per setting")
    p.add_argument("--small", default=small, help=f"small side server model (default {small})")
    p.add_argument("--large", default=large, help=f"large side server model (default {large})")
    p.add_argument("--concurrency", default="1,8,32", help="concurrencies against the servers (default 1,8,32)")
    p.add_argument("--ray-workers", default="1,2", help="Ray worker counts (default 1,2; empty: skip Ray)")
    p.add_argument("--ray-sides", choices=("local", "remote"), default="local", help="what each Ray worker runs")
    p.add_argument("--skip-servers", action="store_true", help="only the Ray part")
    p.add_argument("--json", default=None, help="also write the numbers to this JSON file")
    return p.parse_args(argv)


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def _run(dataset, out, small, large, **overrides) -> dict:
    from routedvlm.data.labelling.job import run_labelling
    from routedvlm.data.labels.schema import read_labels
    from routedvlm.data.toyworld.make_labels import toy_label_config

    cfg = toy_label_config(dataset, out, small, large, progress=False, **overrides)
    load_before, t0 = _load(), time.perf_counter()
    summary = run_labelling(cfg)
    df, meta = read_labels(out)
    return {"samples": summary.labelled_now, "label_s": round(summary.label_seconds, 2),
            "wall_s": round(time.perf_counter() - t0, 2), "samples_per_s": round(summary.labelled_now / summary.label_seconds, 3),
            "errors": summary.errors, "latency_source": meta.get("latency_source"), "load_before": load_before,
            "load_after": _load(), "df": df}


def _same(a, b) -> bool:
    cols = [c for c in a.columns if c.startswith(("answer__", "correct__", "output_tokens__"))]
    x = a.set_index("sample_id").sort_index()[cols]
    y = b.set_index("sample_id").sort_index()[cols]
    return bool(x.equals(y))


def _group(name: str, runs: dict) -> list:
    first = next(iter(runs.values()))
    rows = []
    for label, r in runs.items():
        rows.append({"group": name, "setting": label, "samples_per_s": r["samples_per_s"],
                     "speedup": round(r["samples_per_s"] / first["samples_per_s"], 2), "same_answers": _same(r["df"], first["df"]),
                     "label_s": r["label_s"], "errors": r["errors"], "latency_source": r["latency_source"],
                     "load": f"{r['load_before']} -> {r['load_after']}"})
    return rows


def main(argv=None) -> int:
    args = _args(argv)
    from routedvlm.data.toyworld.make_labels import checkpoint_pair, write_split

    work = pathlib.Path(tempfile.mkdtemp(prefix="bench-label-throughput-"))
    dataset = write_split("label", args.samples, 0, work)
    rows = []
    if not args.skip_servers:
        runs = {f"concurrency {c}": _run(dataset, work / f"c{c}" / "labels.parquet", args.small, args.large,
                                         concurrency=int(c)) for c in args.concurrency.split(",") if c}
        rows += _group("servers", runs)
    workers = [int(w) for w in args.ray_workers.split(",") if w]
    if workers:
        small, large = (args.small, args.large) if args.ray_sides == "remote" else map(str, checkpoint_pair())
        import ray

        ray.init(num_cpus=max(workers), include_dashboard=False, log_to_driver=False)
        try:
            runs = {f"ray {w} worker(s), {args.ray_sides}": _run(dataset, work / f"ray{w}" / "labels.parquet", small,
                                                                  large, ray=True, num_workers=w, concurrency=1)
                    for w in workers}
        finally:
            ray.shutdown()
        rows += _group("ray", runs)
    print(f"{'group':<8} {'setting':<30} {'samples/s':>10} {'speed-up':>9} {'same answers':>13} {'label s':>8}  load (1/5/15 min)")
    for r in rows:
        print(f"{r['group']:<8} {r['setting']:<30} {r['samples_per_s']:>10.3f} {r['speedup']:>8.2f}x "
              f"{str(r['same_answers']):>13} {r['label_s']:>8.1f}  {r['load']}")
    print(f"{args.samples} toy samples per setting; cpu cores {os.cpu_count()}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0 if all(r["same_answers"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
