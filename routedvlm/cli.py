"""The `routedvlm` command and the `train-router` entry point.

Only dispatches: each subcommand lives in the package that owns it and is imported lazily, so
`--help` never imports torch. Every subcommand module exposes `main(argv) -> int`.
"""
from __future__ import annotations

import importlib
import sys

# name -> (module, one-line description)
COMMANDS = {
    "demo": ("routedvlm.training.demo.cli", "run the whole product on the embedded toy world"),
    "label": ("routedvlm.data.labelling.cli", "run both VLMs on a data set and write labels.parquet (also: label merge)"),
    "labels": ("routedvlm.data.labels.cli", "check a labels file (labels validate) or import outcomes (labels import-outcomes)"),
    "train": ("routedvlm.training.train_cli", "train a router from labels (same as train-router)"),
    "serve": ("routedvlm.inference.serving.cli", "serve RoutedVLM as an OpenAI-compatible chat-completions endpoint"),
    "audit": ("routedvlm.data.audit.cli", "shadow audits: audit report LOG (history, plot), audit export LOG"),
    "profile": ("routedvlm.inference.profiling.cli", "measure where each model's latency goes and fit a latency model"),
}

USAGE = """usage: routedvlm <command> [options]

Small/large VLM collaboration with a learned router.

commands:
{commands}

Run `routedvlm <command> --help` for a command's options.
example: routedvlm label --small ./small --large ./large --dataset lmms-lab/ChartQA --limit 100 --out labels.parquet
"""


def _usage() -> str:
    width = max(len(n) for n in COMMANDS)
    lines = [f"  {name.ljust(width)}  {desc}" for name, (_, desc) in COMMANDS.items()]
    return USAGE.format(commands="\n".join(lines))


def _run(module: str, argv: list[str], **kwargs) -> int:
    from routedvlm.errors import RoutedVLMError

    _quiet_progress_when_not_a_tty()
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("routedvlm"):
            print(f"error: this command is not available in this version ({exc.name} is missing)", file=sys.stderr)
            return 2
        raise
    try:
        return int(mod.main(argv, **kwargs) or 0)
    except RoutedVLMError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _quiet_progress_when_not_a_tty() -> None:
    """Progress bars (ours, transformers', MLflow's: all tqdm) redraw at most every 30 s when stderr is a log file
    rather than a terminal, instead of on every step (tqdm reads TQDM_* defaults from the environment)."""
    import os

    if not sys.stderr.isatty():
        os.environ.setdefault("TQDM_MININTERVAL", str(NON_TTY_PROGRESS_SECONDS))


NON_TTY_PROGRESS_SECONDS = 30


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        from importlib.metadata import version

        print(f"routedvlm {version('routedvlm')}")
        return 0
    name = argv[0]
    if name not in COMMANDS:
        print(f"error: unknown command {name!r}; commands are {', '.join(sorted(COMMANDS))}", file=sys.stderr)
        return 2
    return _run(COMMANDS[name][0], argv[1:], **({"prog": "routedvlm train"} if name == "train" else {}))


def train_router_main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    return _run(COMMANDS["train"][0], argv)


if __name__ == "__main__":
    sys.exit(main())
