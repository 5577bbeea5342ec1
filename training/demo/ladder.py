"""`routedvlm demo --ladder`: the toy world's three-model ladder (small, mid, large) against its best two-model pair.

Steps, each the product's own code path: label `n_label` toy `label` samples with the ladder (`run_labelling`, the
`--models` ladder settings, a bounded grid: every model's direct and reasoning answer, the transfers of
`TRANSFER_PAIRS` at K in `K_GRID` and all); train-router + certify a LightGBM router over every strategy of the
ladder, and one over the strategies of each two-model sub-pair (those that run only the pair's models), all at the
same absolute accuracy target and level; label `n_eval` fresh toy `eval` samples the same way (never tuned on) and
replay every certified policy on them (`router.choices` -> realised accuracy and latency from the eval labels).
The best pair is the certified pair policy with the lowest mean latency on the eval samples (the strongest rival).
`compare_ladder` is also what `benchmarks/bench_ladder.py` runs.
"""
from __future__ import annotations

import itertools
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from routedvlm.errors import ConfigError

log = logging.getLogger(__name__)
LADDER = ("small", "mid", "large")
TRANSFER_PAIRS = "small:mid,small:large,mid:large"
K_GRID = (8,)  # the toy traces are ~25 tokens: K=8 was the best partial transfer of the pair (data/toyworld/NOTES.md)
DEFAULT_N_LABEL, DEFAULT_N_EVAL, QUICK_N_LABEL, QUICK_N_EVAL = 400, 200, 120, 60  # the measured run (benchmarks/README)
DEFAULT_MIN_ACCURACY, QUICK_MIN_ACCURACY = 0.85, 0.7


def _f(default, help: str):
    return field(default=default, metadata={"help": help})


@dataclass
class LadderDemoConfig:
    """Settings of the ladder demo / benchmark; `n_label`, `n_eval` and `min_accuracy` default by `quick`."""

    out: str = _f("runs/demo-ladder", "folder for the labels, routers and table.json / table.md")
    n_label: int | None = _f(None, f"toy `label` samples (default {DEFAULT_N_LABEL}; --quick {QUICK_N_LABEL})")
    n_eval: int | None = _f(None, f"fresh toy `eval` samples (default {DEFAULT_N_EVAL}; --quick {QUICK_N_EVAL})")
    min_accuracy: float | None = _f(None, f"the absolute accuracy target every policy is certified at (default "
                                          f"{DEFAULT_MIN_ACCURACY}; --quick {QUICK_MIN_ACCURACY})")
    delta: float = _f(0.1, "Learn-then-Test level of each certificate")
    mode: str = _f("cascade", "router mode of every policy: cascade (the ladder climbs; a pair pays its top model's "
                              "direct answer first) or one-shot (prompt features)")
    calib_fraction: float = _f(0.4, "share of the labelled rows that certify (test: 0.2 of them; the rest train)")
    quick: bool = _f(False, "a reduced run (CI)")
    checkpoints: str | None = _f(None, "folder with the toy small/, mid/ and large/ checkpoints (default: shipped)")
    seed: int = _f(0, "seed of the toy splits and of train-router")
    progress: bool = _f(True, "progress bars on stderr")

    def __post_init__(self):
        self.n_label = self.n_label or (QUICK_N_LABEL if self.quick else DEFAULT_N_LABEL)
        self.n_eval = self.n_eval or (QUICK_N_EVAL if self.quick else DEFAULT_N_EVAL)
        self.min_accuracy = self.min_accuracy or (QUICK_MIN_ACCURACY if self.quick else DEFAULT_MIN_ACCURACY)
        if not 0.0 < float(self.min_accuracy) < 1.0:
            raise ConfigError(f"The `min_accuracy` setting must be in (0, 1). Got {self.min_accuracy!r} instead.")
        if self.n_label < 80:
            raise ConfigError(f"The `n_label` setting must be at least 80 (train-router needs 40 train, 20 "
                              f"calibration and 20 test rows). Got {self.n_label!r} instead.")


def ladder_checkpoints(checkpoints=None) -> tuple[Path, ...]:
    """The toy ladder's checkpoint folders, cheapest first (clear error when one is missing)."""
    from routedvlm.data.toyworld.make_labels import checkpoint_pair
    from routedvlm.errors import ModelLoadError

    small, large = checkpoint_pair(checkpoints)
    mid = small.parent / "mid"
    if not (mid / "config.json").is_file():
        raise ModelLoadError(f"The toy ladder needs a `mid/` checkpoint beside {small}; it has none. Train it with "
                             "`python -m routedvlm.data.toyworld.train_models --sides mid`.")
    return small, mid, large


def label_ladder(cfg: LadderDemoConfig, split: str, n: int, say, *, seed: int | None = None,
                 name: str | None = None) -> Path:
    """Label `n` toy `split` samples (generator seed `seed`, default cfg.seed) with the three-model ladder into
    `<out>/<name>` (default `labels-<split>.parquet`)."""
    from routedvlm.data.labelling.config import LabelConfig
    from routedvlm.data.labelling.job import run_labelling
    from routedvlm.data.toyworld.make_labels import MAX_DIRECT_TOKENS, MAX_REASON_TOKENS, write_split

    from .toy import _fresh

    out = Path(cfg.out)
    labels = out / (name or f"labels-{split}.parquet")
    _fresh(labels)
    dataset = write_split(split, n, cfg.seed if seed is None else seed, out / "data")
    label_cfg = LabelConfig(models=tuple(str(p) for p in ladder_checkpoints(cfg.checkpoints)), dataset=str(dataset),
                            out=str(labels), adapter="toyworld", k_grid=K_GRID, selector="prefix", device="cpu",
                            max_new_tokens=MAX_DIRECT_TOKENS, max_reason_tokens=MAX_REASON_TOKENS,
                            transfer_pairs=TRANSFER_PAIRS, progress=cfg.progress)
    t0 = time.perf_counter()
    summary = run_labelling(label_cfg)
    say(f"{split}: {summary.line()} in {time.perf_counter() - t0:.0f} s")
    return labels


def concat_labels(paths, out: Path) -> Path:
    """One labels file of the rows of several ladder labels files (same models and grid; sample ids must differ)."""
    import pandas as pd

    from routedvlm.data.labels.schema import read_labels, write_labels

    frames, metas = zip(*(read_labels(p) for p in paths))
    df = pd.concat(frames, ignore_index=True)
    if df["sample_id"].duplicated().any():
        raise ConfigError(f"The labels files {[str(p) for p in paths]} share sample ids; label other seeds.")
    meta = {k: v for k, v in metas[0].items() if k not in ("content_hash", "schema_version")}
    return write_labels(df, out, {**meta, "concatenated_from": [Path(p).name for p in paths]})


def policies(strategies) -> dict[str, list[str]]:
    """{'ladder': every strategy, 'small+mid': the strategies that run only small and mid, ...}."""
    from routedvlm.router.strategies import parse_strategy

    out = {"ladder": list(strategies)}
    for a, b in itertools.combinations(LADDER, 2):
        out[f"{a}+{b}"] = [s for s in strategies if set(parse_strategy(s).models) <= {a, b}]
    return out


def train_policy(cfg: LadderDemoConfig, labels_path: Path, name: str, strategies: list[str]):
    """train-router + certify one policy over `strategies` at the shared target; None when no rule certifies."""
    from routedvlm.errors import TrainingError
    from routedvlm.router.strategies import parse_strategy
    from routedvlm.training.config import TrainConfig
    from routedvlm.training.pipeline import train_router

    models = sorted({m for s in strategies for m in parse_strategy(s).models}, key=LADDER.index)
    # a pair's cascade pays its top model's direct answer, as the pair version pays large_direct (training/sub_pairs.py)
    features = None if name == "ladder" or cfg.mode == "one-shot" else ["prompt", f"{models[-1]}_direct"]
    tc = TrainConfig(data=str(labels_path), no_mlflow=True, mode=cfg.mode, strategies=strategies, features=features,
                     no_pair_comparison=True, min_accuracy=cfg.min_accuracy, delta=cfg.delta, seed=cfg.seed, cv_folds=0, num_boost_round=100,
                     output_dir=str(Path(cfg.out) / f"router-{name}"), calib_fraction=cfg.calib_fraction,
                     test_fraction=0.2)
    try:
        return train_router(tc)
    except TrainingError as exc:  # e.g. a pair that cannot reach the target at all
        log.info("%s: no certified policy (%s)", name, exc)
        return None


def replay(router, eval_df) -> dict:
    """Realised accuracy / latency of a certified router's choices on fresh labelled samples."""
    from routedvlm.training.costs import realized_correct, realized_latency

    chosen = router.choices(eval_df)
    policy = router.policy
    correct = realized_correct(eval_df, chosen)
    latency = realized_latency(eval_df, chosen, policy.mode, policy.paid_stages)
    values, counts = np.unique(np.asarray(chosen, dtype=object).astype(str), return_counts=True)
    mix = {str(v): round(c / len(chosen), 3) for v, c in sorted(zip(values, counts), key=lambda t: -t[1])}
    return {"accuracy": float(np.mean(correct)), "mean_latency_ms": float(np.mean(latency)), "mix": mix}


def compare_ladder(cfg: LadderDemoConfig, train_labels: Path, eval_labels: Path, say=lambda msg: None) -> dict:
    """Train + certify the ladder's policy and each sub-pair's at cfg.min_accuracy, replay them on `eval_labels`."""
    from routedvlm.data.labels.schema import read_labels, strategies_in

    train_df, _ = read_labels(train_labels)
    eval_df, _ = read_labels(eval_labels)
    rows = {}
    for name, strategies in policies(strategies_in(train_df)).items():
        t0 = time.perf_counter()
        result = train_policy(cfg, train_labels, name, strategies)
        cert = (result.evaluation["certificate"] if result else {}) or {}
        row = {"policy": name, "strategies": strategies, "certified": bool(cert.get("certified")),
               "certificate": cert.get("statement"), "train_s": round(time.perf_counter() - t0, 1)}
        if result is not None and row["certified"]:
            row.update(replay(result.router, eval_df))
            row["rule"] = str(result.router)
        rows[name] = row
        say(f"{name}: {'certified' if row['certified'] else 'NOT certified'} "
            + (f"-> eval accuracy {row['accuracy']:.3f}, mean {row['mean_latency_ms']:.1f} ms" if "accuracy" in row
               else ""))
    pairs = [r for n, r in rows.items() if n != "ladder" and "accuracy" in r]
    best = min(pairs, key=lambda r: r["mean_latency_ms"]) if pairs else None
    ladder = rows["ladder"]
    ratio = (ladder["mean_latency_ms"] / best["mean_latency_ms"]) if best and "accuracy" in ladder else None
    singles = {s: {"accuracy": float(eval_df[f"correct__{s}"].mean()),
                   "mean_latency_ms": float(eval_df[f"latency_ms__{s}"].mean())} for s in strategies_in(eval_df)}
    return {"target": {"min_accuracy": cfg.min_accuracy, "delta": cfg.delta, "mode": cfg.mode},
            "n_label": len(train_df), "n_eval": len(eval_df), "policies": rows, "singles": singles,
            "best_pair": best["policy"] if best else None, "latency_ratio_ladder_vs_best_pair": ratio}


def table(result: dict) -> str:
    """Markdown: every policy's certificate and its replay on the eval samples, then the single strategies."""
    lines = ["| policy | certified | eval acc | eval mean ms | mix |", "|---|---|---|---|---|"]
    for name, r in result["policies"].items():
        mix = " ".join(f"{k}:{v:.0%}" for k, v in list(r.get("mix", {}).items())[:4])
        acc = f"{r['accuracy']:.3f}" if "accuracy" in r else "-"
        ms = f"{r['mean_latency_ms']:.1f}" if "accuracy" in r else "-"
        best = " (best pair)" if name == result["best_pair"] else ""
        lines.append(f"| {name}{best} | {'yes' if r['certified'] else 'no'} | {acc} | {ms} | {mix} |")
    lines += ["", "| single strategy | eval acc | eval mean ms |", "|---|---|---|"]
    lines += [f"| {s} | {v['accuracy']:.3f} | {v['mean_latency_ms']:.1f} |" for s, v in result["singles"].items()]
    return "\n".join(lines)


def run_ladder_demo(cfg: LadderDemoConfig, say=lambda msg: None) -> dict:
    """Label (label + eval splits), train and certify, replay; writes table.json / table.md under cfg.out."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    say(f"labelling {cfg.n_label} toy `label` samples with the ladder {', '.join(LADDER)} ...")
    train_labels = label_ladder(cfg, "label", cfg.n_label, say)
    say(f"labelling {cfg.n_eval} fresh toy `eval` samples ...")
    eval_labels = label_ladder(cfg, "eval", cfg.n_eval, say)
    result = compare_ladder(cfg, train_labels, eval_labels, say)
    (out / "table.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "table.md").write_text(table(result) + "\n")
    return result
