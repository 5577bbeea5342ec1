"""The labelling job: run every strategy on every sample with shared work, score it, write labels.parquet.

Per sample, `CollaborativePipeline.run_many` runs all requested strategies at once (the small model reasons once,
as far as the largest K needs; the large model's image+question prefix is prefilled once and `large_direct` and
every `transfer_<K>` continue from it; on a ladder of N models the same per model: each source reasons once, each
answering model prefills its prefix once). A ladder's labels are schema version 2 (metadata `ladder`, `models` keyed
by alias). Answers are scored with the data set's official scorer (`correct` =
score >= threshold); latencies are composed from the stage records (`data/labelling/latency.py` says exactly how); features
come from `inference.features.compute_features` on the prompt, the image and the `<m>_direct` results
(`large_direct` / `small_direct` for a pair), the code the runtime uses. The job around it (`job.py`) stores rows crash-safely (`parts.py`),
several samples in flight (`runner.py`) or on Ray (`ray_pool.py`), and merges them into `--out`; the samples come from
`sources.py`, the models and their pricing from `models.py`, the run's metadata from `metadata.py`.
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

from routedvlm.errors import SideUnavailableError
from routedvlm.router.strategies import is_feature_stage
from ..labels.schema import ERROR_COLUMN, answer_col, correct_col, escalate_col, latency_col, tokens_col
from .config import LabelConfig
from .latency import compose_latencies
from .parts import ORDER_COLUMN
from .table import METRIC_COLUMN

log = logging.getLogger(__name__)


# ----- samples ------------------------------------------------------------------------------------------------
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
