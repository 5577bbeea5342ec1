"""The toy-world demo, end to end: label -> train-router (LightGBM and the LoRA probe, both modes; routers.py)
-> register, best certified utility as champion -> RoutedVLM on the eval split.

`run_toy_demo(DemoConfig(...), say)` is what `routedvlm demo` runs; every step is the product's own code path
(`run_labelling`, `train_router` / `train_probe` + `track`, `RoutedVLM.from_pretrained(...,
router="models:/<name>@champion")`). On the eval split each sample is first run through every strategy by the
labeller's `label_sample` and then answered live by RoutedVLM with the champion, the binary accept-or-reason rule,
mutual verification and large_reason, back to back, so both latency sources see the same machine load
(`table.py`); every row says whether the certified target held on the eval split.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from routedvlm.errors import ConfigError, RouterError
from routedvlm.router.checkpoints import portable_path
from routedvlm.router.strategies import LARGE_REASON

from .routers import DEFAULT_ROUTERS, FULL_ROUTERS
from .label_source import BUNDLED_N_LABEL, _fresh, label_split  # noqa: F401 - _fresh, label_split: used by ladder.py too

log = logging.getLogger(__name__)
QUICK_N_LABEL, QUICK_N_EVAL = 80, 24
DEFAULT_N_LABEL, DEFAULT_N_EVAL = BUNDLED_N_LABEL, 150  # 1000: 250 calibration rows certify the default target
MIN_N_LABEL = 80  # train-router's minimum split sizes (40/20/20) at the demo's 25 % calibration / 25 % test shares
SPLIT_SHARE = 0.25
MV_KEEP_TOKENS = 16  # the toy K grid's largest K (traces are ~24 tokens)
DEFAULT_TARGET, QUICK_TARGET = 0.95, 0.7
# --quick: 20 calibration rows certify 0.7 of the best, not 0.95


def _f(default, help: str):
    return field(default=default, metadata={"help": help})


@dataclass
class DemoConfig:
    """Settings of `routedvlm demo` (toy world); `n_label` / `n_eval` default by `quick`."""

    out: str = _f("runs/demo", "folder for labels, router, table.json/.md and plot.png")
    n_label: int | None = _f(None, f"toy `label` samples to label and train on (default {DEFAULT_N_LABEL}; "
                                   f"--quick {QUICK_N_LABEL}; at least {MIN_N_LABEL})")
    n_eval: int | None = _f(None, f"toy `eval` samples (default {DEFAULT_N_EVAL}; --quick {QUICK_N_EVAL})")
    quick: bool = _f(False, "a reduced run for CI (a few dozen samples each)")
    checkpoints: str | None = _f(None, "folder with the toy small/ and large/ checkpoints (default: the shipped pair)")
    tracking_uri: str | None = _f(None, "MLflow tracking URI (default: sqlite store in ./mlruns)")
    register_as: str = _f("vlm-router", "registered model name; the new version is promoted to `champion`")
    target_accuracy: float | None = _f(None, "train-router target: accuracy as a fraction of the best single "
                                             f"strategy's, certified (default {DEFAULT_TARGET}, with --quick "
                                             f"{QUICK_TARGET}: its 20 calibration rows certify no more; 0.98 needs "
                                             "more calibration rows than the demo labels)")
    min_accuracy: float | None = _f(None, "absolute accuracy target instead")
    delta: float = _f(0.1, "Learn-then-Test level of the champion's certificate (each router gets delta / routers)")
    routers: str | None = _f(None, "router types to train, each in cascade and one-shot mode; the best certified "
                                   f"utility becomes champion (default {DEFAULT_ROUTERS!r}: the LoRA probes are most of "
                                   f"a run's CPU; with --full or --quick {FULL_ROUTERS!r})")
    live_mutual_verification: bool = _f(True, "also run mutual verification live through RoutedVLM")
    seed: int = _f(0, "seed of the toy splits and of train-router")
    cost: str | None = _f(None, "profile.json (e.g. of the qwen3-vl-2b/-8b shapes, `routedvlm profile --shape`): price "
                                "every stage by its fitted latency model instead of the toy pair's wall clock "
                                "(simulated economics, real accuracy effects)")
    progress: bool = _f(True, "progress bars on stderr")
    full: bool = _f(False, f"label the {DEFAULT_N_LABEL} toy `label` samples again instead of training on the bundled "
                           "labels (data/toyworld/labels.parquet: the same samples, labeller and shipped pair) and "
                           f"train {FULL_ROUTERS!r} (the run before the default was shortened); about 12 minutes more "
                           "on a quiet 2-core machine")

    def __post_init__(self):
        self.n_label = self.n_label if self.n_label is not None else (QUICK_N_LABEL if self.quick else DEFAULT_N_LABEL)
        self.n_eval = self.n_eval if self.n_eval is not None else (QUICK_N_EVAL if self.quick else DEFAULT_N_EVAL)
        self.split_share = SPLIT_SHARE
        if self.n_label < MIN_N_LABEL:
            raise ConfigError(f"The `n_label` setting must be at least {MIN_N_LABEL} (train-router needs 40 train, "
                              f"20 calibration and 20 test rows). Got {self.n_label!r} instead.")
        if self.target_accuracy is None and self.min_accuracy is None:
            self.target_accuracy = QUICK_TARGET if self.quick else DEFAULT_TARGET
        if self.target_accuracy is not None and self.min_accuracy is not None:
            raise ConfigError("Give one of the `target_accuracy` and `min_accuracy` settings, not both.")
        for name in ("target_accuracy", "min_accuracy"):
            value = getattr(self, name)
            if value is not None and not 0.0 < float(value) < 1.0:
                raise ConfigError(f"The `{name}` setting must be in (0, 1) (target_accuracy: a fraction of the best "
                                  f"single strategy's accuracy). Got {value!r} instead.")
        if not 0.0 < float(self.delta) < 1.0:
            raise ConfigError(f"The `delta` setting must be in (0, 1). Got {self.delta!r} instead.")
        from .routers import parse_routers

        if self.routers is None:
            self.routers = FULL_ROUTERS if self.full or self.quick else DEFAULT_ROUTERS
        parse_routers(self.routers)
        if self.n_eval < 1:
            raise ConfigError(f"The `n_eval` setting must be a positive number of samples. Got {self.n_eval!r} instead.")


@dataclass
class DemoResult:
    rows: list
    header: dict
    paths: dict
    table: str


def train_and_register(cfg: DemoConfig, labels_path: Path, say):
    """Every router of `cfg.routers` in both modes, logged and registered; the best certified one is champion."""
    from . import routers as R

    trained = R.train_all(cfg, labels_path, say)
    best = R.register_all(trained, labels_path, say)
    say("routers (each on its own test split of the label labels):\n" + R.summary_rows(trained))
    say(f"champion: {best.name} ({best.result.evaluation['certificate']['chosen']})\n" + best.result.table)
    return trained, best


def stage_cost(cfg: DemoConfig):
    """(stage_ms(side, record) or None, metadata): the `--cost` profile's prices, or None for the wall clock."""
    if cfg.cost is None:
        return None, {"latency_source": "wall-clock"}
    from routedvlm.data.toyworld.make_labels import checkpoint_pair
    from routedvlm.inference.profiling.latency_model import cost_stage_fn

    small, large = checkpoint_pair(cfg.checkpoints)
    return cost_stage_fn(cfg.cost, small_path=small, large_path=large)


def live_one(routed, sample, stage_ms=None) -> dict:
    """Answer one sample through `routed` (a RoutedVLM): its record (correct, latency_ms, strategy, wall_ms, ...).

    With `stage_ms` (a cost profile) latency_ms prices the stages that ran instead of their wall clock (+ the
    measured feature and decision time)."""
    t0 = time.perf_counter()
    out = routed.generate(image=sample.images[0], question=sample.question)  # RoutedVLM applies the template
    wall = (time.perf_counter() - t0) * 1000
    latency = float(out.latency_ms) if stage_ms is None else out.overhead_ms + sum(
        stage_ms(r["model"], r) for r in out.trace if r["stage"] != "decision")
    return {"sample_id": sample.sample_id, "answer": out.text, "correct": bool(sample.score(out.text) >= 0.5),
            "strategy": out.strategy, "latency_ms": float(latency), "wall_ms": wall, "fallback": bool(out.fallback)}


def evaluate_interleaved(cfg: DemoConfig, routers: dict, samples, strategies, out: Path):
    """Per eval sample: the labeller's run of every strategy (`label_sample`, what `routedvlm label` runs, on the
    same pipeline) and then each RoutedVLM in `routers` ({row name: RoutedVLM}), back to back, so both sources see
    the same machine load. Returns (eval labels table, {row name: [records]}); the table is written to `out`."""
    import json

    import pandas as pd
    from tqdm.auto import tqdm

    from routedvlm.data.labelling.table import build_table
    from routedvlm.data.labelling.per_sample import label_sample
    from routedvlm.data.labels.schema import write_labels

    pipe = next(iter(routers.values())).pipeline
    stage_ms, cost_meta = stage_cost(cfg)
    rows, records = [], {name: [] for name in routers}
    for s in tqdm(samples, desc="eval", unit="sample", disable=not cfg.progress, dynamic_ncols=True):
        row = {"sample_id": s.sample_id, "dataset": s.dataset, "task_type": s.task_type, "question": s.prompt,
               "reference": json.dumps(s.references)}
        rows.append({**row, **label_sample(pipe, s, strategies, 0.5, stage_ms)})
        for name, routed in routers.items():
            records[name].append(live_one(routed, s, stage_ms))
    from routedvlm.data.labelling.metadata import model_revision
    from routedvlm.data.toyworld.make_labels import checkpoint_pair

    table = build_table(pd.DataFrame(rows), strategies)
    models = {side: {"name": str(p), "revision": model_revision(p)}
              for side, p in zip(("small", "large"), checkpoint_pair(cfg.checkpoints))}
    write_labels(table, out, {"strategies": list(strategies), "candidates": list(strategies), "selector": "prefix",
                              "k_grid": list(pipe.k_grid), **cost_meta, "models": models,
                              "written_by": "routedvlm demo (eval split, interleaved with RoutedVLM)"})
    return table, records


def load_routed(cfg: DemoConfig, info: dict, labels_hash: str):
    """RoutedVLM on the toy pair with the champion router; refuses a fallback or a stale champion."""
    from routedvlm.data.toyworld.make_labels import MAX_DIRECT_TOKENS, MAX_REASON_TOKENS, TOY_K_GRID, checkpoint_pair
    from routedvlm.inference import RoutedVLM

    small, large = checkpoint_pair(cfg.checkpoints)
    uri = f"models:/{cfg.register_as}@champion"
    routed = RoutedVLM.from_pretrained(str(small), str(large), router=uri, tracking_uri=info["tracking_uri"],
                                       fallback=f"mutual-verification:{MV_KEEP_TOKENS}", k_grid=TOY_K_GRID,
                                       max_direct_tokens=MAX_DIRECT_TOKENS, max_reason_tokens=MAX_REASON_TOKENS,
                                       device="cpu")
    if routed.router is None:
        raise RouterError(f"RoutedVLM could not load {uri} ({routed.router_error}).")
    if routed.router.policy.training_data_hash != labels_hash:
        raise RouterError(f"{uri} is not the router this demo just trained (its training data hash differs).")
    return routed, uri


def run_toy_demo(cfg: DemoConfig, say=log.info) -> DemoResult:
    """The whole demo (module docstring); `say(msg)` reports progress."""
    from . import routers as R
    from . import table as T
    from .label_source import bundled_labels, training_labels

    stage_cost(cfg)  # a bad --cost profile fails before any labelling
    t0, report = time.perf_counter(), say
    say = lambda msg: report(f"({time.perf_counter() - t0:5.0f} s) {msg}")  # noqa: E731
    label_labels = training_labels(cfg, say)  # label_source.py: the bundled labels, or labelled now
    say(f"[2/4] train-router ({cfg.routers}; cascade and one-shot each) + MLflow registration ...")
    trained, best = train_and_register(cfg, label_labels, say)
    routed, uri = load_routed(cfg, best.info, best.result.labels_hash)
    binary, binary_from = R.binary_router(trained, best)
    live_names = [CHAMPION, *([BINARY] if binary is not None else []),
                  *([MUTUAL] if cfg.live_mutual_verification else []), REFERENCE]
    say(f"[3/4] {cfg.n_eval} toy `eval` samples: every strategy (the labeller), then live through RoutedVLM: "
        + ", ".join(live_names) + " ...")
    eval_df, live = eval_split(cfg, routed, binary)
    say("[4/4] the side-by-side table ...")
    cert, ref = routed.router.policy.certificate, T.reference_ms(eval_df)
    target = T.eval_target(eval_df, cert)
    rows = live_rows(live, T) + T.replay_rows(trained, best, binary, binary_from, eval_df, ref, MV_KEEP_TOKENS)
    rows = T.with_verdicts(rows, target)
    header = {"router": uri, "champion": best.name, "version": best.info.get("version"),
              "tracking_uri": portable_path(best.info["tracking_uri"]), "mode": routed.router.policy.mode,
              "rule": routed.router.policy.decision_rule, "target": routed.router.policy.target,
              "certificate": cert, "eval_target": target, "delta": cfg.delta, "n_routers": len(trained),
              "n_label": cfg.n_label, "n_eval": len(eval_df),
              "label_source": "bundled" if bundled_labels(cfg) is not None else "labelled",
              "live_fallbacks": sum(r["fallback"] for r in live[CHAMPION]), "live_wall_mean_ms": rows[0]["wall_mean_ms"],
              "seconds": round(time.perf_counter() - t0, 1), **cost_header(cfg)}
    paths = T.write_outputs(Path(cfg.out), rows, header, T.rule_curves(best, eval_df))
    return DemoResult(rows, header, {k: str(v) for k, v in paths.items()}, T.format_text(rows))


def cost_header(cfg: DemoConfig) -> dict:
    """The table header's latency source: the wall clock, or the `--cost` profile and the models pricing each side."""
    if cfg.cost is None:
        return {"latency_source": "wall-clock"}
    _, meta = stage_cost(cfg)
    return {"latency_source": "cost-model (simulated economics, real accuracy effects)", "cost_profile": cfg.cost,
            "cost_models": meta["cost_models"], "cost_profile_sha256": meta["cost_profile_sha256"]}


CHAMPION = "champion (RoutedVLM)"
BINARY = "binary large_direct/large_reason (RoutedVLM)"
MUTUAL = f"mutual verification K={MV_KEEP_TOKENS} (RoutedVLM)"
REFERENCE = "large_reason (RoutedVLM)"


def eval_split(cfg: DemoConfig, routed, binary=None):
    """(eval labels without failed rows, with the samples' images; {live row name: records}) for `cfg.n_eval`
    toy `eval` samples."""
    from routedvlm.data.loading import load_samples
    from routedvlm.data.toyworld.make_labels import TOY_K_GRID, write_split
    from routedvlm.inference import RoutedVLM
    from routedvlm.router.strategies import default_strategies

    from ..probe.data import with_images

    out = Path(cfg.out)
    dataset = write_split("eval", cfg.n_eval, cfg.seed, out / "data")
    samples = load_samples(str(dataset), adapter="toyworld")
    routers = {CHAMPION: routed}
    if binary is not None:
        routers[BINARY] = RoutedVLM(routed.pipeline, router=binary)
    if cfg.live_mutual_verification:
        routers[MUTUAL] = RoutedVLM(routed.pipeline, router=f"mutual-verification:{MV_KEEP_TOKENS}")
    routers[REFERENCE] = RoutedVLM(routed.pipeline, router=LARGE_REASON)
    _fresh(out / "labels-eval.parquet")
    _, live = evaluate_interleaved(cfg, routers, samples, default_strategies(TOY_K_GRID), out / "labels-eval.parquet")
    df = _read_ok(out / "labels-eval.parquet")
    images = {s.sample_id: s.images[0] for s in samples}
    return with_images(df, [images[i] for i in df["sample_id"]]), live


def live_rows(live: dict, T) -> list[dict]:
    """Table rows of the live records; their speed-up reference is `large_reason` run live the same way
    (RoutedVLM with a fixed policy on the same pipeline)."""
    ref = float(sum(r["latency_ms"] for r in live[REFERENCE]) / len(live[REFERENCE]))
    kinds = {CHAMPION: "learned", BINARY: "baseline", MUTUAL: "baseline", REFERENCE: "reference"}
    return [T.live_row(name, kinds[name], records, ref) for name, records in live.items()]


def _read_ok(path: Path):
    """The labels of `path` without failed rows."""
    from routedvlm.data.labels.schema import failed_rows, read_labels

    df, _ = read_labels(path)
    return df.loc[~failed_rows(df)].reset_index(drop=True)
