"""Reading labels for train-router: the file (or the embedded toy labels), validated, plus its metadata.

Validation and the parquet metadata format belong to `routedvlm.data.labels`; this module adds the train-router
defaults (embedded toy labels) and accepts labels from any writer: a file, a folder or a glob of parquet files
(Ray, Spark), without `routedvlm` metadata or with a stale content hash (both warned about); the content hash
that the router and MLflow record is always computed from the table as loaded.
"""
from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from routedvlm.errors import TrainingError

log = logging.getLogger(__name__)


def embedded_labels_path() -> Path:
    """Where the toy world's labels are installed (`routedvlm/data/toyworld/labels.parquet`)."""
    import routedvlm.data.toyworld as toyworld

    return Path(toyworld.__file__).resolve().parent / "labels.parquet"


def resolve_data_path(path) -> tuple[Path, bool]:
    """(path, is_embedded): `path`, or the embedded toy labels when None; clear errors when missing."""
    if path is None:
        embedded = embedded_labels_path()
        if not embedded.is_file():
            raise TrainingError("No --data given and no embedded toy labels are installed "
                                f"({embedded} does not exist). Pass --data labels.parquet "
                                "(write one with `routedvlm label ...`).")
        return embedded, True
    from routedvlm.data.labels.schema import labels_files
    from routedvlm.errors import LabelsError

    try:
        labels_files(path)
    except LabelsError:
        raise TrainingError(f"The labels file {str(path)!r} does not exist. Pass the labels.parquet that "
                            "`routedvlm label` wrote, a folder of parquet files or a glob (--data PATH).") from None
    return Path(path), False


def load_labels(path) -> tuple[pd.DataFrame, dict]:
    """Read and validate labels (every problem reported at once; LabelsError), drop failed rows (`error` set);
    returns (table, metadata + `source_path`, `embedded`, `failed_rows`). Metadata problems (another writer, a
    filtered table) are warnings; `content_hash` is the table's as loaded (`recorded_content_hash`: the stale one)."""
    from routedvlm.data.labels import schema, validate

    path, embedded = resolve_data_path(path)
    if embedded:
        log.warning("no --data given: using the embedded toy labels at %s", path)
    df, metadata = schema.read_labels(path)
    failed = schema.failed_rows(df)
    if not (~failed).any():  # no usable row (empty, or every sample failed): the row count says it best
        from .split import check_enough_rows

        check_enough_rows(df.loc[~failed], int(failed.sum()))
    warnings = validate.check_labels(df, metadata, strict=False)
    actual = schema.content_hash(df)
    for msg in warnings:
        log.warning("%s: %s; training on the table as it is (content hash %s, computed on load, is what the router "
                    "and MLflow record)", path, msg, actual[:16])
    if metadata.get("content_hash") not in (None, actual):
        metadata = {**metadata, "recorded_content_hash": metadata["content_hash"]}
    if warnings and metadata.get("candidates") and not set(metadata["candidates"]) <= set(schema.strategies_in(df)):
        metadata = {k: v for k, v in metadata.items() if k != "candidates"}
    metadata = {**metadata, "content_hash": actual}
    if failed.any():
        log.warning("ignoring %d failed sample(s) (the `error` column is set)", int(failed.sum()))
        df = df.loc[~failed].reset_index(drop=True)
    from routedvlm.router.checkpoints import portable_path

    return df, {**metadata, "source_path": portable_path(path), "embedded": embedded, "failed_rows": int(failed.sum())}


def content_hash(df: pd.DataFrame) -> str:
    from routedvlm.data.labels.schema import content_hash as _hash

    return _hash(df)
