"""`routedvlm labels add-features`: add the small VLM's state features (`feat__small_direct__state_<i>`,
inference/encoders/state.py) to an existing labels table without relabelling it.

Only the small model's `small_direct` pass is re-run on each labelled sample (reloaded by id from the labels'
`sample_source`; a toy split regenerates from its file name), through the same pipeline and feature code RoutedVLM runs.
The result is written atomically (a temp file, then a rename): the input table is never lost, also when writing in
place or when a sample fails. The labels' metadata gains `state` (model, weights hash, layer, projection seed, dims, and
how many recomputed answers equal the labels' own `small_direct` answers).
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

from routedvlm.errors import ConfigError, DatasetError, LabelsError

log = logging.getLogger(__name__)


def _images(labels, metadata: dict, dataset: str | None):
    """The first image of every labelled sample, in row order, reloaded from the labels' sample source."""
    from routedvlm.data.loading import SampleSource, load_samples

    recorded = dict(metadata.get("sample_source") or {})
    if dataset:
        same = recorded.get("dataset") == dataset
        source = SampleSource(dataset, *(recorded.get(k) if same else None for k in ("config", "split", "adapter", "limit")))
    elif recorded.get("dataset"):
        source = SampleSource.from_dict(recorded)
    else:
        raise LabelsError("The labels' metadata records no `sample_source` to reload the images from. Pass --dataset "
                          "ID_OR_PATH: the data set the labels were made from.")
    if source.adapter == "toyworld":
        from routedvlm.data.toyworld.make_labels import rebuild_split_file

        rebuild_split_file(source.dataset)
    ids = [str(i) for i in labels["sample_id"]]
    try:
        samples = load_samples(**source.to_dict(), ids=ids)
    except DatasetError as exc:
        raise LabelsError(f"Cannot reload the samples behind the labels from {source.dataset!r}: {exc} Pass --dataset "
                          "with the data set the labels were made from.") from None
    images = {s.sample_id: s.images[0] for s in samples if s.images}
    missing = [i for i in ids if i not in images]
    if missing:
        raise LabelsError(f"{len(missing)} labelled samples have no image in {source.dataset!r} (e.g. {missing[:3]}). "
                          "Pass --dataset with the data set the labels were made from.")
    return [images[i] for i in ids]


def small_checkpoint(metadata: dict, given=None) -> Path:
    """The labels' small VLM folder: `given` (--small), else the recorded one (or a shipped toy checkpoint with the same
    weights hash)."""
    from routedvlm.router.checkpoints import locate_checkpoint, recorded_weights

    small = (metadata.get("models") or {}).get("small") or {}
    if not given and (small.get("server") or small.get("device") == "remote"):
        raise ConfigError("The labels' small model was served over HTTP, which returns no hidden states. Pass --small "
                          "FOLDER with the same checkpoint on this machine.")
    return locate_checkpoint(small.get("name"), recorded_weights(small), given=given, flag="--small",
                             what="The small model of the state features (the labels' small side)")


def state_frame(pipe, state, questions, images, progress: bool = False):
    """(DataFrame of the state columns, small_direct answers): the small_direct pass of each (image, question) through
    `pipe` (its small side capturing `state.layer`), and the features from `compute_features` — the runtime's code."""
    import pandas as pd
    from tqdm.auto import tqdm

    from routedvlm.inference.features import compute_features
    from routedvlm.inference.inputs import load_image

    rows, answers = [], []
    for image, question in tqdm(list(zip(images, questions)), desc="small_direct state", unit="sample",
                                disable=not progress):
        image = load_image(image)
        result = pipe.run(image, question, "small_direct")
        rows.append(compute_features(question, [image], {"small_direct": result}, names=state.names))
        answers.append(result.answer)
    return pd.DataFrame(rows, columns=state.names), answers


def small_pipeline(small_path: Path, metadata: dict):
    """(a pipeline whose only side is the small model, as the labels' run configured it; that side), not started:
    the labeller's stage code, for recomputing or re-timing the small model's stages."""
    from routedvlm.inference import CollaborativePipeline
    from routedvlm.inference.pipeline_parts import PipelineConfig
    from routedvlm.inference.prompts import PromptConfig
    from routedvlm.inference.sides import load_side
    from routedvlm.inference.sides.kinds import LOCAL

    prompts = metadata.get("prompts")
    side = load_side(LOCAL.spec(small_path), prompts=PromptConfig(**prompts) if prompts else None)
    gen = {k: v for k, v in (metadata.get("generation") or {}).items() if k in
           ("max_direct_tokens", "max_reason_tokens", "min_new_tokens", "min_reason_tokens")}
    return CollaborativePipeline(side, side, config=PipelineConfig(**gen)), side


def run_small_stage(pipe, image, question: str, stage: str):
    """One stage of `small_pipeline`'s pipeline on an image (PIL, path or bytes) and a question: the labeller's call."""
    from routedvlm.inference.inputs import load_image

    return pipe.run(load_image(image), question, stage)


def add_state_features(labels_path, out=None, *, small=None, dataset=None, layer: int = -1, dims: int = 16,
                       seed: int = 0, progress: bool = False) -> Path:
    """Write `labels_path` plus the state columns to `out` (default: in place, atomically); returns `out`."""
    from routedvlm.inference.encoders.state import PREFIX, StateFeatures, enable_state

    from .schema import read_labels, write_labels

    target = Path(out) if out else Path(labels_path)
    if target.is_dir() or not str(target).endswith(".parquet"):
        raise ConfigError(f"`--out` must be a .parquet file (a labels folder needs --out FILE). Got {str(target)!r}.")
    labels, metadata = read_labels(labels_path)
    small_path = small_checkpoint(metadata, small)
    state = StateFeatures.from_checkpoint(small_path, layer=layer, dims=dims, seed=seed)
    images = _images(labels, metadata, dataset)
    pipe, side = small_pipeline(small_path, metadata)
    enable_state(state, side)
    t0 = time.perf_counter()
    try:
        side.start()
        frame, answers = state_frame(pipe, state, list(labels["question"]), images, progress)
    finally:
        side.close()
    recorded = list(labels.get("answer__small_direct", [None] * len(labels)))
    same = sum(a is not None and a == b for a, b in zip(recorded, answers))
    if same < len(labels):
        log.warning("the recomputed small_direct answer differs from the labels' on %d of %d rows: the small model or "
                    "its settings may differ from the labelling run", len(labels) - same, len(labels))
    out_df = labels.drop(columns=[c for c in labels.columns if str(c).startswith(PREFIX)])
    for name in state.names:
        out_df[name] = frame[name].to_numpy()
    meta = {k: v for k, v in metadata.items() if k not in ("content_hash", "schema_version")}
    meta["state"] = {**state.spec(), "recomputed": {"rows": len(labels), "seconds": round(time.perf_counter() - t0, 2),
                                                    "answers_equal_labels": int(same)}}
    return write_labels(out_df, target, meta)
