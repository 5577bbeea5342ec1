"""Bounds on reading a labels set, checked before the table is turned into a DataFrame: row count and
uncompressed size from the parquet footers, cell sizes on the Arrow table, the `routedvlm` metadata's size and
JSON nesting before it is parsed, and its schema version (newer than this code: refused with a message).

Each limit has a default sized far above a real labels set and an environment variable that raises it
(`ROUTEDVLM_LABELS_MAX_ROWS`, `..._MAX_BYTES`, `..._MAX_CELL_BYTES`, `..._MAX_ID_BYTES` (sample_id cells),
`..._MAX_METADATA_BYTES`, `..._MAX_METADATA_DEPTH`). `id_key` is the lookalike key of a sample id: NFKC and zero-width characters removed;
two ids with one key are reported as duplicates by validation.
"""
from __future__ import annotations

import json
import os
import unicodedata

from routedvlm.errors import LabelsError

DEFAULTS = {"MAX_ROWS": 2_000_000, "MAX_BYTES": 4 * 2**30, "MAX_CELL_BYTES": 256 * 2**10, "MAX_ID_BYTES": 1024,
            "MAX_METADATA_BYTES": 2**20, "MAX_METADATA_DEPTH": 64}
ID_COLUMN = "sample_id"
ZERO_WIDTH = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad\u180e"))


def limit(name: str) -> int:
    """The limit `name` (a DEFAULTS key), from $ROUTEDVLM_LABELS_<name> when set to a positive integer."""
    raw = os.environ.get(f"ROUTEDVLM_LABELS_{name}", "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else DEFAULTS[name]


def _refuse(path, what: str, value, name: str) -> LabelsError:
    return LabelsError(f"{path}: {what} {value} passes the limit of {limit(name)} (raise it with "
                       f"ROUTEDVLM_LABELS_{name} if this set is genuine).")


def check_footers(path, files) -> None:
    """Row count and uncompressed size over `files`, read from their parquet footers only."""
    import pyarrow.parquet as pq

    rows = size = 0
    for f in files:
        meta = pq.ParquetFile(f).metadata
        rows += meta.num_rows
        size += sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    if rows > limit("MAX_ROWS"):
        raise _refuse(path, "row count", rows, "MAX_ROWS")
    if size > limit("MAX_BYTES"):
        raise _refuse(path, "uncompressed size (bytes)", size, "MAX_BYTES")


def check_cells(path, table) -> None:
    """The longest string or binary cell of every column of an Arrow table, before it becomes a DataFrame."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for name, column in zip(table.column_names, table.columns):
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)
                or pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)):
            continue
        longest = pc.max(pc.binary_length(column)).as_py() if len(column) else 0
        which = "MAX_ID_BYTES" if name == ID_COLUMN else "MAX_CELL_BYTES"
        if longest is not None and longest > limit(which):
            raise _refuse(path, f"a cell of column {name!r} holds", f"{longest} bytes, which", which)


def json_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in JSON `text` (brackets inside strings not counted)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def parse_metadata(raw: bytes, key: str, schema_version: int) -> tuple[dict | None, str | None]:
    """(metadata, None) or (None, the problem) for the raw `key` metadata; LabelsError for a newer schema version."""
    if len(raw) > limit("MAX_METADATA_BYTES"):
        return None, (f"metadata '{key}' is {len(raw)} bytes, more than the limit of {limit('MAX_METADATA_BYTES')} "
                      "(ROUTEDVLM_LABELS_MAX_METADATA_BYTES)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"metadata '{key}' is not valid JSON ({exc})"
    depth = json_depth(text)
    if depth > limit("MAX_METADATA_DEPTH"):
        return None, (f"metadata '{key}' nests JSON {depth} levels deep, more than the limit of "
                      f"{limit('MAX_METADATA_DEPTH')} (ROUTEDVLM_LABELS_MAX_METADATA_DEPTH)")
    try:
        meta = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        return None, f"metadata '{key}' is not valid JSON ({type(exc).__name__}: {exc})"
    if not isinstance(meta, dict):
        return None, f"metadata '{key}' must be a JSON object, got {type(meta).__name__}"
    version = meta.get("schema_version")
    if isinstance(version, int) and not isinstance(version, bool) and version > schema_version:
        raise LabelsError(f"This labels set has schema_version {version}, newer than the version {schema_version} "
                          "this routedvlm reads. Upgrade routedvlm, or relabel with this version.")
    return meta, None


def id_key(sample_id: str) -> str:
    """The lookalike key of a sample id: NFKC-normalised, zero-width characters removed."""
    return unicodedata.normalize("NFKC", str(sample_id)).translate(ZERO_WIDTH)
