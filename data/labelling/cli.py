"""`routedvlm label ...` (run both VLMs on a data set, write labels.parquet) and `routedvlm label merge OUT FILES...`.

Flags are the fields of `LabelConfig` (help texts come from there). No torch import until the run starts.
"""
from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import MISSING, fields

EPILOG = """examples:
  routedvlm label --small Qwen/Qwen3-VL-2B-Thinking --large Qwen/Qwen3-VL-8B-Instruct \\
      --dataset lmms-lab/ChartQA --limit 500 --out labels.parquet --dtype bfloat16
  routedvlm label --small http://127.0.0.1:8102/v1#toy-small --large http://127.0.0.1:8101/v1#toy-large \\
      --dataset toy.parquet --adapter toyworld --k-grid 4,8,16 --out labels.parquet     (models served by vLLM)
  routedvlm label ... --shard 0/4 --out part0.parquet      (one of four machines; same flags elsewhere)
  routedvlm label ... --resume                              (finish an interrupted run)
  routedvlm label --small http://h:8002/v1#small --large http://h:8001/v1#large ... --concurrency 32 --cost profile.json
  routedvlm label ... --ray --num-workers 8 --gpus-per-worker 1   (a Ray cluster; --ray-address auto to join one)
  ROUTEDVLM_VLLM_ENGINE_ARGS='{"gpu_memory_utilization": 0.4}' routedvlm label --small vllm:/ckpt/small \\
      --large vllm:/ckpt/large ... --ray --gpus-per-worker 1   (in-process vLLM engines: two per worker, one GPU each worker)
  routedvlm label merge labels.parquet part0.parquet part1.parquet part2.parquet part3.parquet
"""
MERGE_EPILOG = "example: routedvlm label merge labels.parquet shard0.parquet shard1.parquet"
FLAG_NAMES = {"dataset_config": "--config"}
REQUIRED = ("small", "large", "dataset", "out")
INT_FIELDS = ("limit", "max_new_tokens", "max_reason_tokens", "min_new_tokens", "min_reason_tokens", "flush_every",
              "concurrency", "num_workers", "threads")
FLOAT_FIELDS = ("threshold", "gpus_per_worker")
SWITCHES = ("resume", "ray")


def _parser() -> argparse.ArgumentParser:
    from .config import LabelConfig

    p = argparse.ArgumentParser(prog="routedvlm label", description="Run both VLMs on a data set with every strategy "
                                "(sharing work) and write labels.parquet.", epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    for f in fields(LabelConfig):
        flag = FLAG_NAMES.get(f.name, "--" + f.name.replace("_", "-"))
        help_text = f.metadata.get("help", "").replace("%", "%%")
        if f.name == "progress":
            p.add_argument("--no-progress", dest="progress", action="store_false", help="hide the progress bar")
        elif f.name in SWITCHES:
            p.add_argument(flag, dest=f.name, action="store_true", help=help_text)
        else:
            kind = int if f.name in INT_FIELDS else float if f.name in FLOAT_FIELDS else str
            default = None if f.default is MISSING else f.default
            p.add_argument(flag, dest=f.name, type=kind, default=default, required=f.name in REQUIRED,
                           metavar=f.name.upper().replace("DATASET_", ""), help=help_text)
    return p


def _merge_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="routedvlm label merge", description="Join the labels files of a run's shards.",
                                epilog=MERGE_EPILOG)
    p.add_argument("out", metavar="OUT", help="merged labels.parquet to write")
    p.add_argument("files", metavar="SHARD_FILE", nargs="+", help="labels files written with --shard I/N")
    p.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    return p


def _setup_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("routedvlm")
    if not root.handlers:
        root.addHandler(handler)
    root.setLevel(logging.INFO)


def merge_main(argv: list[str]) -> int:
    from .merge import merge_label_files

    args = _merge_parser().parse_args(argv)
    _setup_logging()
    df = merge_label_files(args.out, args.files, overwrite=args.overwrite)
    print(f"merged {len(args.files)} files, {len(df)} samples, into {args.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "merge":
        return merge_main(argv[1:])
    args = _parser().parse_args(argv)
    from .config import LabelConfig
    from .job import run_labelling

    cfg = LabelConfig(**vars(args))
    _setup_logging()
    summary = run_labelling(cfg)
    print(summary.line())
    if summary.samples and summary.errors == summary.samples:
        print(f"error: every sample failed ({summary.errors} of {summary.samples}); the labels hold no usable row. "
              "Fix the first errors above (the `error` column has each) and run again.", file=sys.stderr)
        return 1
    return 0
