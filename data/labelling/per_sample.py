"""The labelling job: run every strategy on every sample with shared work, score it, write labels.parquet.

Per sample, `CollaborativePipeline.run_many` runs all requested strategies at once (the small model reasons once,
as far as the largest K needs; the large model's image+question prefix is prefilled once and `large_direct` and
every `transfer_<K>` continue from it; on a ladder of N models the same per model: each source reasons once, each
answering model prefills its prefix once). A ladder's labels are schema version 2 (metadata `ladder`, `models` keyed
by alias). Answers are scored with the data set's official scorer (`correct` =
score >= threshold); latencies are composed from the stage records (`data/labelling/latency.py` says exactly how); features
come from `inference.features.compute_features` on the prompt, the image and the `<m>_direct` results
(`large_direct` / `small_direct` for a pair), the code the runtime uses. The job around it (`job.py`) stores rows crash-safely (`parts.py`),
several samples in flight (`runner.py`) or on Ray (`ray_pool.py`), and merges them into `--out`.
The text sent to the models, and stored as `question`, is `Sample.prompt`: the question through the prompt template
(`--prompt-template`; default the adapter's: none for local data, lmms-eval's post prompts for the known
benchmarks), which the metadata records as `prompt_template` (the router and RoutedVLM apply the same).
A sample must have exactly one image; a failure of the sample itself (an undecodable image, a request the model
refuses) is recorded in the `error` column and the run goes on; a side's outage (`SideUnavailableError`: a server
that still fails after its retries) stops the run instead, and the sample is labelled again by `--resume`.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from routedvlm.errors import SideUnavailableError
from routedvlm.router.strategies import DEFAULT_K_GRID, is_feature_stage
from ..labels.schema import ERROR_COLUMN, answer_col, correct_col, escalate_col, latency_col, tokens_col
from ..loading import SampleSource
from .config import LabelConfig
from .latency import compose_latencies
from .parts import ORDER_COLUMN
from .table import METRIC_COLUMN

log = logging.getLogger(__name__)
EXECUTION_MODE = "one-stage+two-stage"
REMOTE_MEASUREMENT = ("per-sample cache_salt namespaces: standalone calls cold; two-stage calls reuse only the "
                      "large_direct prefix (server-reported cached tokens); one-stage transfers measured cold too "
                      "unless a cost model prices them (inference/backends/remote_prompt.py)")


@dataclass
class LabelSummary:
    """What a labelling run did."""

    out: str
    samples: int = 0
    labelled_now: int = 0
    errors: int = 0
    error_examples: list = field(default_factory=list)
    seconds: float = 0.0
    label_seconds: float = 0.0
    outages: int = 0  # rows an earlier run stored for a side's outage, labelled again in this run

    def line(self) -> str:
        rate = self.labelled_now / self.label_seconds if self.label_seconds > 0 else 0.0
        text = (f"wrote {self.samples} samples to {self.out} ({self.labelled_now} labelled in this run, "
                f"{rate:.2f} samples/s); {self.outages} stored side outage(s) labelled again; {self.errors} failed "
                "(the sample's own failure)")
        return text + (f": {'; '.join(self.error_examples)}" if self.error_examples else "")


# ----- samples ------------------------------------------------------------------------------------------------
def open_source(cfg: LabelConfig):
    """(resolved SampleSource, [(position, sample_id)], load(position) -> Sample). Rows are decoded one at a time,
    so a broken row fails alone (its load raises) instead of failing the whole data set."""
    from .. import loading
    from ..adapters import resolve_adapter, row_to_sample

    source = SampleSource(cfg.dataset, cfg.dataset_config, cfg.split, cfg.adapter, cfg.limit)
    local, base_dir, config = Path(source.dataset).expanduser(), None, source.config
    if local.exists():
        ds, split = loading.open_local(local, source.split)
        adapter = resolve_adapter(source.dataset, source.adapter, config=config, columns=ds.column_names)
        base_dir = local.parent if local.is_file() else local
    else:
        adapter = resolve_adapter(source.dataset, source.adapter, config=config)
        ds, config, split = loading.open_hub(source.dataset, adapter, config, source.split)
    missing = adapter.missing_columns(ds.column_names)
    if missing:
        from routedvlm.errors import DatasetError

        raise DatasetError(f"Data set {source.dataset!r} lacks columns adapter {adapter.name!r} needs: {missing}; "
                           f"found {sorted(ds.column_names)}. Pass --adapter or rename the columns.")
    positions = loading.select_rows(ds, adapter, split, None, source.limit)
    id_col = adapter.column("id", ds.column_names)
    ids = [str(v) for v in ds[id_col]] if id_col else None
    keyed = [(i, ids[i] if ids else f"{split}-{i}") for i in positions]

    name = local.stem if adapter.name == "local" and local.exists() else adapter.name
    template = adapter.template(cfg.prompt_template)

    def load(position: int, sample_id: str):
        sample = row_to_sample(adapter, ds[int(position)], sample_id)
        sample.images = [loading.load_sample_image(img, base_dir, sample_id) for img in sample.images]
        sample.template = template
        sample.dataset = name if adapter.name == "local" else sample.dataset
        return sample

    load.dataset_name = name  # for rows whose sample cannot be loaded
    return SampleSource(source.dataset, config, split, adapter.name, source.limit), keyed, load


# ----- one sample ---------------------------------------------------------------------------------------------
def _image(sample):
    from routedvlm.inference.inputs import load_image
    from routedvlm.errors import InputError

    if len(sample.images) != 1:
        raise InputError(f"sample {sample.sample_id!r} has {len(sample.images)} images; the pipeline takes exactly one")
    return load_image(sample.images[0])


def label_sample(pipe, sample, strategies, threshold: float, stage_ms=None) -> dict:
    """One labels row (without `label`): answers, correctness, latencies, output tokens, escalate costs, features."""
    from routedvlm.inference.features import compute_features

    image = _image(sample)
    results = pipe.run_many(image, sample.prompt, list(strategies))
    standalone, escalate = compose_latencies(results, stage_ms)
    row = {}
    for sid in strategies:
        res = results[sid]
        row[answer_col(sid)] = res.answer
        row[correct_col(sid)] = bool(sample.score(res.answer) >= threshold)
        row[latency_col(sid)] = standalone[sid]
        row[tokens_col(sid)] = int(res.output_tokens)
    row.update({escalate_col(k): ms for k, ms in escalate.items()})
    stages = {s: res for s, res in results.items() if s != "prompt" and is_feature_stage(s)}
    row.update(compute_features(sample.prompt, [image], stages))
    return row


def _base_row(position, sample_id, sample, source_name) -> dict:
    return {
        ORDER_COLUMN: int(position), "sample_id": sample_id,
        "dataset": sample.dataset if sample else source_name,
        "task_type": sample.task_type if sample else None,
        "question": sample.prompt if sample else "",
        "reference": json.dumps(sample.references if sample else []),
        METRIC_COLUMN: sample.metric if sample else None,
    }


def process(pipe, cfg: LabelConfig, position, sample_id, load, source_name, stage_ms) -> dict:
    """The row of one sample; any failure (unreadable image, model error) becomes its `error` value."""
    sample = None
    try:
        sample = load(position, sample_id)
        row = {**_base_row(position, sample_id, sample, source_name),
               **label_sample(pipe, sample, cfg.strategies, cfg.threshold, stage_ms)}
        row[ERROR_COLUMN] = None
    except (KeyboardInterrupt, SystemExit, SideUnavailableError):
        raise
    except Exception as exc:  # noqa: BLE001 - recorded per sample, the run goes on
        log.warning("sample %s failed: %s: %s", sample_id, type(exc).__name__, exc)
        row = {**_base_row(position, sample_id, sample, source_name), ERROR_COLUMN: f"{type(exc).__name__}: {exc}"}
    return row


# ----- models, metadata ---------------------------------------------------------------------------------------
def load_side(spec: str, reasoner, device: str, dtype, *, measure_cold: bool):
    """One side (`routedvlm.inference.load_side`): a local checkpoint / hub id, or '<base_url>#<model id>' on an
    OpenAI-compatible server (whose one-stage transfers are then also measured cold when `measure_cold`, i.e. for
    wall-clock latencies; without it the side is `priced`: it sends no request that exists only to measure)."""
    from routedvlm.inference.sides import load_side as load

    side = load(spec, reasoner=reasoner, device=device, dtype=dtype)
    side.measure_cold, side.priced = measure_cold, not measure_cold
    return side


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def load_pipeline(cfg: LabelConfig):
    """(CollaborativePipeline with every model of the ladder loaded, resolved device)."""
    from routedvlm.inference import CollaborativePipeline
    from routedvlm.inference.sides.local import resolve_device, set_threads

    from .config import every_side

    set_threads(cfg.threads)
    meaning_of(cfg)  # registers the meaning features label_sample computes (in every worker process)
    device = "remote" if every_side(cfg, "remote") else resolve_device(cfg.device)
    reasoners, loaded = cfg.ladder_reasoners(), {}
    sides = []
    for alias, spec in cfg.ladder_specs().items():
        key = (str(spec), reasoners.get(alias)) if cfg.is_ladder else alias  # one copy of a model two rungs name alike
        if key not in loaded:
            loaded[key] = load_side(spec, reasoners.get(alias), device, cfg.dtype, measure_cold=cfg.cost is None)
        sides.append(loaded[key])
    pipe = CollaborativePipeline(
        sides=sides, selector=cfg.selector, k_grid=cfg.k_grid or DEFAULT_K_GRID, max_direct_tokens=cfg.max_new_tokens,
        max_reason_tokens=cfg.max_reason_tokens, min_new_tokens=cfg.min_new_tokens, min_reason_tokens=cfg.min_reason_tokens,
    )
    state_of(cfg, pipe)  # the small model's state features: captured and registered, or unregistered
    return pipe, device


def state_of(cfg: LabelConfig, pipe=None):
    """The small VLM's state features of `cfg.state_dims` (None when 0); with `pipe`, switched on for its small side
    (registered for label_sample, capture on) — or, without state features, taken out of the feature registry."""
    from routedvlm.inference.encoders.state import StateFeatures, enable_state, unregister_state

    if not cfg.state_dims:
        if pipe is not None:
            unregister_state()
        return None
    state = StateFeatures.from_checkpoint(cfg.small, dims=cfg.state_dims)
    if pipe is not None:
        enable_state(state, pipe.small)
    return state


def stage_cost(cfg: LabelConfig, source: str):
    """(stage_ms callable or None for wall clock, metadata about the latency source `source`)."""
    if cfg.cost is None:
        return None, {"latency_source": source}
    from routedvlm.inference.profiling.latency_model import cost_stage_fn

    if cfg.is_ladder:
        from .ladder import parse_assignments

        named = {"small": cfg.cost_model_small, "large": cfg.cost_model_large,
                 **parse_assignments(cfg.cost_models, "cost_models", cfg.aliases)}
        return cost_stage_fn(cfg.cost, small=named["small"], large=named["large"], small_path=cfg.small,
                             large_path=cfg.large, ladder={a: (named.get(a), spec) for a, spec in cfg.ladder_specs().items()})
    return cost_stage_fn(cfg.cost, small=cfg.cost_model_small, large=cfg.cost_model_large,
                         small_path=cfg.small, large_path=cfg.large)


def build_metadata(cfg: LabelConfig, pipe, device: str, source: SampleSource, cost_meta: dict) -> dict:
    """The run's part of the `routedvlm` metadata (counts, scorers and the content hash are added at the end)."""
    from dataclasses import asdict

    from routedvlm.router.provenance import now_iso

    from ..adapters import get_adapter
    from .metadata import library_versions, scale_info, side_info

    models = {alias: side_info(side) for alias, side in pipe.sides.items()}
    remote = [alias for alias in models if "server" in models[alias]]  # sides measured over HTTP
    ladder = {"ladder": list(pipe.aliases)} if len(pipe.aliases) > 2 else {}
    extra = {"remote_measurement": REMOTE_MEASUREMENT, "remote_sides": remote} if remote else {}
    return {
        **extra, **ladder, "models": models, "selector": cfg.selector, "k_grid": list(cfg.k_grid), "strategies": list(cfg.strategies),
        "candidates": list(cfg.strategies), "prompts": pipe.large.prompts.to_dict(), "generation": asdict(pipe.config),
        "prompt_template": get_adapter(source.adapter).template(cfg.prompt_template).to_dict(),
        "threshold": cfg.threshold, "execution_mode": EXECUTION_MODE, **cost_meta, **scale_info(cfg),
        "torch_threads": _torch_threads(),
        "libraries": library_versions(), "created_at": now_iso(), "sample_source": source.to_dict(), "shard": cfg.shard,
        "run_settings": cfg.settings(), **({"encoder": meaning_of(cfg).spec()} if cfg.encoder else {}),
        **({"state": state_of(cfg).spec()} if cfg.state_dims else {}),
    }


_MEANING: dict = {}
PROBE_PROMPTS = ("What is shown in the image?", "How many red objects are there? Answer with a number.",
                 "Is the largest bar taller than the second largest one? Answer yes or no.")


def meaning_of(cfg: LabelConfig):
    """The meaning features of `cfg.encoder` (loaded once per process and registered; None without an encoder), its
    cost measured on a few probe prompts."""
    if not cfg.encoder:
        return None
    key = (cfg.encoder, cfg.encoder_dims)
    if key not in _MEANING:
        from routedvlm.inference.encoders import load_meaning

        meaning = load_meaning(cfg.encoder, cfg.encoder_dims)
        meaning.ms_per_prompt = round(meaning.encoder.ms_per_prompt(PROBE_PROMPTS), 3)
        _MEANING[key] = meaning
    return _MEANING[key]
