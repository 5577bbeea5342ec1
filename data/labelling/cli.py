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

a ladder of three or more models (cheapest first; named small, mid, large; labels schema version 2):
  routedvlm label --model Qwen/Qwen3-VL-2B-Thinking --model Qwen/Qwen3-VL-4B-Thinking --model Qwen/Qwen3-VL-8B-Thinking \\
      --dataset lmms-lab/ChartQA --limit 500 --k-grid 32,128 --out ladder.parquet --estimate-only
  routedvlm label --models small/,mid/,large/ --transfer-pairs small:mid,mid:large --reason-models small,mid \\
      --k-grid 16,64 --reasoner mid=mid-thinking/ --dataset toy.parquet --out ladder.parquet
  The grid grows with N^2: N directs + N reasoning + (N(N-1)/2 pairs x (|K grid| + 1)) transfers; --transfer-pairs,
  --reason-models and --k-grid bound it. A ladder's run prints the model calls per sample before it starts;
  --estimate-only also times one sample and prints the whole run's estimate, then exits.
"""
MERGE_EPILOG = "example: routedvlm label merge labels.parquet shard0.parquet shard1.parquet"
FLAG_NAMES = {"dataset_config": "--config"}
REQUIRED = ("dataset", "out")
METAVARS = {"transfer_pairs": "FROM:TO,...", "reason_models": "M,..."}
REPEATED = {"models": ("--model", "SPEC"), "reasoners": ("--reasoner", "ALIAS=SPEC"),
            "cost_models": ("--cost-model", "ALIAS=NAME")}
INT_FIELDS = ("limit", "max_new_tokens", "max_reason_tokens", "min_new_tokens", "min_reason_tokens", "flush_every",
              "concurrency", "num_workers", "threads", "encoder_dims", "state_dims")
FLOAT_FIELDS = ("threshold", "gpus_per_worker")
SWITCHES = ("resume", "ray", "estimate_only")


def _parser() -> argparse.ArgumentParser:
    from .config import LabelConfig

    p = argparse.ArgumentParser(prog="routedvlm label", description="Run a pair (--small/--large) or a ladder "
                                "(--model ..., cheapest first) of VLMs on a data set with every strategy (sharing "
                                "work) and write labels.parquet.", epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    for f in fields(LabelConfig):
        flag = FLAG_NAMES.get(f.name, "--" + f.name.replace("_", "-"))
        help_text = f.metadata.get("help", "").replace("%", "%%")
        if f.name == "progress":
            p.add_argument("--no-progress", dest="progress", action="store_false", help="hide the progress bar")
        elif f.name in REPEATED:
            name, meta = REPEATED[f.name]
            p.add_argument(name, dest=f.name, action="append", metavar=meta, help=help_text)
            if f.name == "models":
                p.add_argument("--models", dest="models_list", metavar="A,B,C",
                               help="the ladder as one comma-separated list, cheapest first (instead of --model)")
        elif f.name == "estimate_only":
            p.add_argument("--estimate-only", "--dry-run", dest=f.name, action="store_true", help=help_text)
        elif f.name in SWITCHES:
            p.add_argument(flag, dest=f.name, action="store_true", help=help_text)
        else:
            kind = int if f.name in INT_FIELDS else float if f.name in FLOAT_FIELDS else str
            default = None if f.default is MISSING else f.default
            p.add_argument(flag, dest=f.name, type=kind, default=default, required=f.name in REQUIRED,
                           metavar=METAVARS.get(f.name, f.name.upper().replace("DATASET_", "")), help=help_text)
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


def config_from_args(args, error):
    """The LabelConfig of parsed `routedvlm label` arguments (`--models A,B,C` is the repeated `--model`); `error(msg)`
    reports a conflict (the parser's error in the CLI)."""
    from .config import LabelConfig

    values = dict(vars(args))
    listed = values.pop("models_list", None)
    if listed is not None:
        if values["models"]:
            error("pass the ladder as --model ... (repeated) or as --models A,B,C, not both")
        values["models"] = listed
    return LabelConfig(**values)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "merge":
        return merge_main(argv[1:])
    parser = _parser()
    args = parser.parse_args(argv)
    from .estimate import describe_grid, estimate_run
    from .job import run_labelling

    cfg = config_from_args(args, parser.error)
    _setup_logging()
    if cfg.is_ladder or cfg.estimate_only:  # a pair's output stays what it was
        print(describe_grid(cfg), file=sys.stderr)
    if cfg.estimate_only:
        print(estimate_run(cfg))
        return 0
    summary = run_labelling(cfg)
    print(summary.line())
    if summary.samples and summary.errors == summary.samples:
        print(f"error: every sample failed ({summary.errors} of {summary.samples}); the labels hold no usable row. "
              "Fix the first errors above (the `error` column has each) and run again.", file=sys.stderr)
        return 1
    return 0
