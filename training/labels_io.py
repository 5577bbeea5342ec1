"""Reading labels for train-router: the file (or the embedded toy labels), validated, plus its metadata.

Validation and the parquet metadata format belong to `routedvlm.data.labels`; this module only adds the
train-router defaults (embedded toy labels) and a content hash for files that carry none.
"""
from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import pandas as pd

from routedvlm.router.errors import LabelsError, TrainingError

log = logging.getLogger(__name__)
METADATA_KEY = b"routedvlm"


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
    path = Path(path)
    if not path.is_file():
        raise TrainingError(f"The labels file {str(path)!r} does not exist. Pass the labels.parquet that "
                            "`routedvlm label` wrote (--data PATH).")
    return path, False


def content_hash(df: pd.DataFrame) -> str:
    """sha256 of the table's content (row order and dtypes included)."""
    h = hashlib.sha256(",".join(map(str, df.columns)).encode())
    h.update(pd.util.hash_pandas_object(df, index=False).to_numpy().tobytes())
    return h.hexdigest()


def read_metadata(path: Path) -> dict:
    import pyarrow.parquet as pq

    raw = (pq.read_schema(path).metadata or {}).get(METADATA_KEY)
    if raw is None:
        return {}
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        raise LabelsError(f"The `routedvlm` metadata of {path} is not valid JSON; relabel the data.") from None


def load_labels(path) -> tuple[pd.DataFrame, dict]:
    """Read and validate a labels file (every problem reported at once); returns (table, metadata)."""
    from routedvlm.data import labels as schema

    path, embedded = resolve_data_path(path)
    if embedded:
        log.warning("no --data given: using the embedded toy labels at %s", path)
    try:
        df = pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises several types for a non-parquet file
        raise LabelsError(f"{path} is not a readable parquet file ({type(exc).__name__}: {exc}).") from None
    metadata = read_metadata(path)
    schema.validate_labels(df, metadata) if _takes_metadata(schema.validate_labels) else schema.validate_labels(df)
    return df, {**metadata, "source_path": str(path), "embedded": embedded}


def _takes_metadata(fn) -> bool:
    import inspect

    return len(inspect.signature(fn).parameters) >= 2


def write_labels(df: pd.DataFrame, path, metadata: dict) -> Path:
    """Write `df` as parquet with `metadata` under the `routedvlm` key (used for synthetic labels)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(df, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                           METADATA_KEY: json.dumps(metadata).encode()})
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path
