"""`train-router` / `routedvlm train`: argparse built from TrainConfig; progress on stderr, the table on stdout.

Exit codes: 0 trained (and registered unless --no-register); 2 bad input or configuration (nothing registered).
"""
from __future__ import annotations

import argparse
import sys
import textwrap
import time
from dataclasses import MISSING, fields

from .config import TrainConfig

EPILOG = """example:
  train-router --data labels.parquet --target-accuracy 0.95 --delta 0.1
  train-router --data labels.parquet --mode one-shot --max-latency-ms 800 --no-register
  train-router --data labels.parquet --router self-probe   # reads the large model's own hidden state
  mlflow ui --backend-store-uri sqlite:///mlruns/mlflow.db   # browse runs and registered routers
"""


def build_parser(prog: str = "train-router") -> argparse.ArgumentParser:
    """The shared flags (TrainConfig's fields), then one group per router type with the flags generated from its
    settings dataclass (training/settings.py); a setting two types declare is one flag, in the first one's group."""
    from importlib.metadata import version

    from .settings import settings_classes

    parser = argparse.ArgumentParser(
        prog=prog, description="Train a router from labels.parquet: fit, certify a decision rule "
        "(Learn-then-Test), evaluate against baselines, log to MLflow and register it.", epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-V", "--version", action="version", version=f"routedvlm {version('routedvlm')}")
    seen = set()
    shared = parser.add_argument_group("every router type")
    add_flags(shared, [f for f in fields(TrainConfig) if f.metadata.get("flag", True)], seen)
    classes = settings_classes()
    for name, cls in classes.items():
        own = [f for f in fields(cls) if f.name not in seen]
        others = {f.name: [n for n, c in classes.items() if n != name and f.name in {g.name for g in fields(c)}]
                  for f in own}
        doc = " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())
        if not fields(cls):
            doc += " No settings of its own."
        group = parser.add_argument_group(f"--router {name}", textwrap.fill(doc, 76))
        add_flags(group, own, seen, also=others)
    return parser


def add_flags(parser, dataclass_fields, seen: set, also: dict | None = None) -> None:
    """One flag per field: `a_b` -> `--a-b`, its type from the annotation (a bool is a switch), its default and help
    from the field (metadata `choices`, a sequence or a function returning one; `aliases`; `conv`, a function or the
    name of one in config.py)."""
    for f in dataclass_fields:
        seen.add(f.name)
        flag = "--" + f.name.replace("_", "-")
        kind = str(f.type)
        default = None if f.default is MISSING else f.default
        help_text = f.metadata.get("help", "")
        shared = (also or {}).get(f.name)
        if shared:
            help_text += f" (also for --router {', '.join(shared)})"
        if kind == "bool":
            parser.add_argument(flag, action="store_true", help=help_text)
            continue
        conv = float if "float" in kind else int if kind.startswith("int") else str
        if "conv" in f.metadata:  # a field parsed by its own function (e.g. 'auto' or a number)
            from . import config as configmod

            conv = f.metadata["conv"] if callable(f.metadata["conv"]) else getattr(configmod, f.metadata["conv"])
        choices = f.metadata.get("choices")
        kw = {"choices": tuple(choices() if callable(choices) else choices)} if choices is not None else {}
        shown = f" (default: {default})" if default is not None and default is not False else ""  # 0 is shown
        parser.add_argument(flag, *f.metadata.get("aliases", ()), type=conv, default=default, help=help_text + shown, **kw)


def _progress(msg: str) -> None:
    print(f"[train-router] {msg}", file=sys.stderr, flush=True)


def _track(track, config, result, labels) -> dict:
    """`track(...)`, with every failure of the store (MLflow, SQLAlchemy, alembic, the store lock, the file system)
    turned into a one-line TrainingError (exit 2); the traceback goes to the debug log."""
    import logging

    from routedvlm.errors import RoutedVLMError, TrainingError
    from routedvlm.router.tracking import one_line

    try:
        return track(config, result, labels)
    except RoutedVLMError:
        raise
    except Exception as exc:  # noqa: BLE001 - a boundary: the router is saved, the store failed
        logging.getLogger(__name__).debug("MLflow logging failed", exc_info=True)
        raise TrainingError(f"MLflow logging failed ({type(exc).__name__}: {one_line(exc)}). The router itself is "
                            f"saved in {result.output_dir / 'router'}; check --tracking-uri or pass --no-mlflow.") from None


def main(argv: list[str] | None = None, prog: str = "train-router") -> int:
    """Parse flags, train, print the evaluation table; RoutedVLMError propagates to the dispatcher (exit 2)."""
    import logging

    args = build_parser(prog).parse_args(argv)
    config = TrainConfig(**vars(args))
    logging.basicConfig(level=logging.WARNING, format="[train-router] %(message)s")
    logging.getLogger("routedvlm.training").setLevel(logging.INFO)
    from .labels_io import load_labels
    from .pipeline import train_router

    t0 = time.perf_counter()
    labels, metadata = load_labels(config.data)
    where = "the embedded toy labels " if metadata.get("embedded") else ""
    _progress(f"read {len(labels)} labelled samples from {where}{metadata['source_path']}")
    result = train_router(config, labels, metadata)  # the trainer of config.router, from the registry
    ev = result.evaluation
    _progress(f"trained {len(result.router.policy.strategies)} strategy models on {ev['split']['train']} rows; "
              f"rule {ev['certificate']['chosen']} (calibration: accuracy {ev['calibration']['accuracy']:.3f}, "
              f"{ev['calibration']['mean_latency_ms']:.0f} ms) in {time.perf_counter() - t0:.1f}s")
    print(result.table)
    print(f"router: {result.output_dir / 'router'}  (evaluation.json, curve.png beside it)")
    if not config.no_mlflow:
        from .tracking import track

        _progress("logging to MLflow ...")
        info = _track(track, config, result, labels)
        print(f"mlflow run {info['run_id']} at {info['tracking_uri']}")
        if "version" in info:
            state = "champion" if info["champion"] else "not champion"
            print(f"registered {info['registered_as']} version {info['version']} ({state}: {info['champion_reason']})")
            cert = result.router.policy.certificate or {}
            if (cert.get("routers_compared") or 1) > 1:  # the registry's delta ledger restated it (docs/DESIGN.md)
                print(f"certificate after the choice among versions: {cert['statement']}")
            print(f"load it with: load_router('models:/{info['registered_as']}/{info['version']}')")
    return 0
