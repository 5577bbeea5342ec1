"""The samples behind a labels table, for the LoRA probe: reloaded by id from the labels' `sample_source`
metadata (or `--dataset`), joined to the labels as `image` and `question` columns.

`question` is the labels' own `question` column: the exact text the models were asked (`Sample.prompt`).
A sample with several images contributes its first one (the probe's prompt holds one image).
"""
from __future__ import annotations

import logging

import pandas as pd

from routedvlm.errors import DatasetError, TrainingError

log = logging.getLogger(__name__)


def sample_source(metadata: dict, dataset: str | None = None):
    """The SampleSource to reload the samples from: the labels' metadata, with `dataset` replacing its data set."""
    from routedvlm.data.loading import SampleSource

    recorded = dict(metadata.get("sample_source") or {})
    if dataset is None:
        if not recorded.get("dataset"):
            raise TrainingError("The labels' metadata records no `sample_source` to reload the images from (synthetic "
                                "or older labels). Pass --dataset ID_OR_PATH: the data set the labels were made from.")
        return SampleSource.from_dict(recorded)
    same = recorded.get("dataset") == dataset
    return SampleSource(dataset, *(recorded.get(k) if same else None for k in ("config", "split", "adapter", "limit")))


def attach_samples(labels: pd.DataFrame, metadata: dict, dataset: str | None = None) -> pd.DataFrame:
    """`labels` plus `image` (PIL image or path) and `question` columns, from the reloaded samples."""
    from routedvlm.data.loading import load_samples

    source = sample_source(metadata, dataset)
    if source.adapter == "toyworld":  # toy splits are regenerated from their file name (the bundled labels)
        from routedvlm.data.toyworld.make_labels import rebuild_split_file

        rebuild_split_file(source.dataset)
    ids = [str(i) for i in labels["sample_id"]]
    log.info("reloading %d samples from %s", len(ids), source.dataset)
    try:
        samples = load_samples(**source.to_dict(), ids=ids)
    except DatasetError as exc:
        raise TrainingError(f"Cannot reload the samples behind the labels from {source.dataset!r}: {exc} "
                            "Pass --dataset with the data set the labels were made from.") from None
    images = {s.sample_id: s.images[0] for s in samples if s.images}
    missing = [i for i in ids if i not in images]
    if missing:
        raise TrainingError(f"{len(missing)} labelled samples have no image in {source.dataset!r} (e.g. {missing[:3]}); "
                            "the probe reads the image. Pass --dataset with the data set the labels were made from.")
    return with_images(labels, [images[i] for i in ids])


def with_images(labels: pd.DataFrame, images: list) -> pd.DataFrame:
    """`labels` with an `image` column (one per row, in row order); `question` is the labels' column."""
    if len(images) != len(labels):
        raise TrainingError(f"Got {len(images)} images for {len(labels)} labelled rows.")
    out = labels.copy()
    out["image"] = pd.Series(list(images), index=labels.index, dtype=object)
    return out
