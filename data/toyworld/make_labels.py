"""The toy world's labels: write a toy split as a local data set and label it with the project's own labeller.

`python -m routedvlm.data.toyworld.make_labels --out data/toyworld/labels.parquet [--n 400] [--split label]
[--checkpoints DIR]` runs exactly what `routedvlm label` runs (`LabelConfig` + `run_labelling`) on the shipped pair.
Toy settings, and why:
- K grid 4, 8, 16 (+ `transfer_all`): a toy reasoning trace is `red=S. blue=B. S*B=P.`, about 24 tokens with the
  character-level tokenizer, so the default grid (16 ... 256) would make every K >= 32 equal to `transfer_all`.
  K = 4 carries the red sum, 8 adds the blue count, 16 reaches the product, all is the whole trace.
- at most 8 tokens for a direct answer (the largest product, 45 x 5 = 225, is 3 characters + end of turn) and
  48 for a reasoning run (trace + `</think>` + answer).
"""
from __future__ import annotations

import argparse
import logging
import re
import sys
from pathlib import Path

from routedvlm.errors import ConfigError, ModelLoadError

TOY_K_GRID = (4, 8, 16)
MAX_DIRECT_TOKENS = 8
MAX_REASON_TOKENS = 48
DEFAULT_WORKDIR = Path("runs") / "toyworld"
EPILOG = ("example: python -m routedvlm.data.toyworld.make_labels --out data/toyworld/labels.parquet --n 400\n"
          "         python -m routedvlm.data.toyworld.make_labels --split eval --n 200 --out runs/toy-eval-labels.parquet")
log = logging.getLogger(__name__)


def toyworld_dir() -> Path:
    """The installed `routedvlm/data/toyworld` folder (shipped checkpoints, bundled labels)."""
    return Path(__file__).resolve().parent


def default_checkpoints() -> Path:
    return toyworld_dir() / "checkpoints"


def checkpoint_pair(checkpoints=None) -> tuple[Path, Path]:
    """(small, large) checkpoint folders under `checkpoints` (default: the shipped ones); clear error if absent."""
    root = Path(checkpoints) if checkpoints is not None else default_checkpoints()
    pair = (root / "small", root / "large")
    missing = [str(p) for p in pair if not (p / "config.json").is_file()]
    if missing:
        raise ModelLoadError(f"The toy checkpoints must be folders `small/` and `large/` with a config.json under "
                             f"{str(root)!r}; missing {missing}. Pass --checkpoints DIR, or train them with "
                             "`python -m routedvlm.data.toyworld.train_models --out DIR`.")
    return pair


def write_split(split: str, n: int, seed: int, workdir) -> Path:
    """Write `n` samples of the toy `split` as a local parquet data set under `workdir`; returns its path."""
    from .task import check_split, make_samples, write_dataset

    check_split(split)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"toy-{split}-n{n}-seed{seed}.parquet"
    write_dataset(make_samples(split, n, seed), path)
    return path


_SPLIT_FILE = re.compile(r"toy-(?P<split>[a-z]+)-n(?P<n>[0-9]+)-seed(?P<seed>[0-9]+)\.parquet")


def rebuild_split_file(dataset) -> Path | None:
    """Write the toy split file `dataset` again if it is missing and named as `write_split` names it.

    Toy splits are a pure function of (split, n, seed), so labels made from one (the bundled labels among them)
    can reload their samples on any machine. Returns the path when written, None when it exists or is not a
    toy split file name.
    """
    path = Path(dataset)
    match = _SPLIT_FILE.fullmatch(path.name)
    if path.exists() or match is None:
        return None
    log.info("the toy data set %s is missing: generating it again (split %s, n %s, seed %s)",
             path, match["split"], match["n"], match["seed"])
    return write_split(match["split"], int(match["n"]), int(match["seed"]), path.parent)


def toy_label_config(dataset, out, small, large, *, progress: bool = True, **overrides):
    """The `LabelConfig` of a toy labelling run (module docstring: K grid and token limits)."""
    from ..labelling.config import LabelConfig

    settings = dict(adapter="toyworld", k_grid=TOY_K_GRID, selector="prefix", device="cpu",
                    max_new_tokens=MAX_DIRECT_TOKENS, max_reason_tokens=MAX_REASON_TOKENS, progress=progress)
    settings.update(overrides)
    return LabelConfig(small=str(small), large=str(large), dataset=str(dataset), out=str(out), **settings)


def make_labels(out, *, split: str = "label", n: int = 400, seed: int = 0, checkpoints=None, workdir=None,
                progress: bool = True, resume: bool = False):
    """Label `n` samples of the toy `split` into `out` (a labels.parquet); returns the `LabelSummary`."""
    if n <= 0:
        raise ConfigError(f"The `n` setting must be a positive number of samples. Got {n!r} instead.")
    checkpoint_pair(checkpoints)  # fail before writing anything
    dataset = write_split(split, n, seed, workdir if workdir is not None else DEFAULT_WORKDIR)
    return label_dataset(dataset, out, checkpoints=checkpoints, progress=progress, resume=resume)


def label_dataset(dataset, out, *, checkpoints=None, progress: bool = True, resume: bool = False, cost=None):
    """Label a toy data set written by `write_split` into `out` with the toy settings; returns the `LabelSummary`.

    cost: a profile.json pricing every stage by its fitted latency model (`routedvlm label --cost`)."""
    from ..labelling.job import run_labelling

    small, large = checkpoint_pair(checkpoints)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    log.info("labelling %s with %s and %s", dataset, small, large)
    extra = {"cost": str(cost)} if cost is not None else {}
    return run_labelling(toy_label_config(dataset, out, small, large, progress=progress, resume=resume, **extra))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m routedvlm.data.toyworld.make_labels", epilog=EPILOG,
                                description="Label a toy split with the shipped toy VLM pair (routedvlm label).",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="labels.parquet to write")
    p.add_argument("--split", default="label", help="toy split: label (default) or eval")
    p.add_argument("--n", type=int, default=400, help="samples to label (default 400)")
    p.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    p.add_argument("--checkpoints", default=None, help="folder with small/ and large/ (default: the shipped pair)")
    p.add_argument("--workdir", default=str(DEFAULT_WORKDIR), help=f"where the data set goes (default {DEFAULT_WORKDIR})")
    p.add_argument("--resume", action="store_true", help="finish an interrupted run with the same settings")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[make-labels] %(message)s")
    summary = make_labels(args.out, split=args.split, n=args.n, seed=args.seed, checkpoints=args.checkpoints,
                          workdir=args.workdir, progress=not args.no_progress, resume=args.resume)
    print(summary.line())
    return 0 if summary.errors == 0 else 1


if __name__ == "__main__":
    from routedvlm.errors import RoutedVLMError

    try:
        sys.exit(main())
    except RoutedVLMError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
