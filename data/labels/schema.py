"""The labels.parquet schema (versions 1 and 2, DESIGN.md): column names, labels, content hash, atomic read/write.

Version 1 is a pair of models (`small`, `large`); version 2 a ladder of N >= 3 models (metadata `ladder`: the aliases
cheapest first, `models` keyed by alias), whose ids and columns are the ladder's (`<m>_direct`, `<m>_reason`,
`transfer_<a>_<b>_<K|all>`, `latency_ms__escalate_<a>_<b>_<K|all>`, `feat__<m>_direct__...`). `write_labels` writes
version 2 exactly when the metadata names a ladder of more than two models; readers read both.

One row per sample: `sample_id`, `dataset`, `task_type`, `question`, `reference` (JSON of the gold answers);
per strategy s that ran: `answer__s`, `correct__s` (bool), `latency_ms__s` (float), `output_tokens__s` (int);
per transfer: `latency_ms__escalate_<K>` (`latency_ms__escalate_all` for transfer_all); features
`feat__<stages>__<name>` (float, NaN allowed); `label`; optional `error` (a failed sample: excluded from the
label checks). The parquet key-value metadata `routedvlm` is JSON with `schema_version` and `content_hash`.

Cost model (shared by calibration and evaluation, see training/costs.py):
- `latency_ms__<s>` is the standalone end-to-end latency of strategy s on the sample.
- `latency_ms__escalate_<K>` is everything that must still happen AFTER `large_direct` has answered to
  obtain the `transfer_<K>` answer in two-stage mode: the small model's reasoning (up to K tokens with the
  prefix selector) plus the large model's continuation from its cached image+question prefix (no second
  vision encoding or prompt prefill). `latency_ms__escalate_all` is the same for `transfer_all`.
- A policy's realized latency on a sample = what its mode paid before deciding + the incremental cost of
  the chosen strategy. `one-shot` pays nothing first; incremental(s) = `latency_ms__s`. `cascade` pays
  `latency_ms__large_direct` (+ `latency_ms__small_direct` when a feature needs that stage, summed as if
  sequential); then large_direct costs 0, small_direct 0 if paid, transfer_K `latency_ms__escalate_K`,
  any other s `latency_ms__s`.
- `label` is the cheapest correct candidate by `latency_ms__<s>` (ties: canonical strategy order), or `none`.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from routedvlm.errors import LabelsError
from routedvlm.router.strategies import is_strategy, parse_strategy, strategy_order

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2  # the newest version this routedvlm reads and writes
PAIR_SCHEMA_VERSION = 1  # a pair's labels (no `ladder` metadata, or a ladder of two)
METADATA_KEY = "routedvlm"
NO_LABEL = "none"
BASE_COLUMNS = ("sample_id", "dataset", "task_type", "question", "reference")
LABEL_COLUMN = "label"
ERROR_COLUMN = "error"
PER_STRATEGY = ("answer", "correct", "latency_ms", "output_tokens")  # column prefixes, `<prefix>__<s>`
FEATURE_RE = re.compile(r"^feat__(?P<stages>[A-Za-z0-9+]+(?:_[A-Za-z0-9+]+)*)__(?P<name>.+)$")
ESCALATE_RE = re.compile(r"^latency_ms__escalate_(?P<k>(?:[a-z0-9]+_[a-z0-9]+_)?(?:all|\d+))$")


def answer_col(s: str) -> str:
    return f"answer__{s}"


def correct_col(s: str) -> str:
    return f"correct__{s}"


def latency_col(s: str) -> str:
    return f"latency_ms__{s}"


def tokens_col(s: str) -> str:
    return f"output_tokens__{s}"


def escalate_col(k) -> str:
    """The two-stage increment column of a transfer: `latency_ms__escalate_<K>` for `transfer_<K>` (k=None, "all" or
    "transfer_all": `latency_ms__escalate_all`); a ladder transfer id `transfer_<src>_<dst>_<K|all>` gives
    `latency_ms__escalate_<src>_<dst>_<K|all>`."""
    if isinstance(k, str) and k.startswith("transfer_"):
        return "latency_ms__" + parse_strategy(k).escalate_id
    return "latency_ms__escalate_all" if k is None or k == "all" else f"latency_ms__escalate_{int(k)}"


def is_feature_column(name: str) -> bool:
    return bool(FEATURE_RE.match(name))


def classify_column(name: str) -> tuple[str, str | None]:
    """(kind, strategy or stage spec) of a column name. Kinds: base, label, error, answer, correct,
    latency_ms, output_tokens (arg = strategy id text, maybe unknown), escalate (arg = 'K' or 'all'),
    feature (arg = stages), unknown."""
    if name in BASE_COLUMNS:
        return "base", None
    if name in (LABEL_COLUMN, ERROR_COLUMN):
        return name, None
    m = ESCALATE_RE.match(name)
    if m:
        return "escalate", m.group("k")
    m = FEATURE_RE.match(name)
    if m:
        return "feature", m.group("stages")
    prefix, sep, rest = name.partition("__")
    if sep and prefix in PER_STRATEGY and rest:
        return prefix, rest
    return "unknown", None


def strategies_in(df) -> list[str]:
    """Strategy ids with at least one per-strategy column in `df`, in the canonical order."""
    found = set()
    for c in df.columns:
        kind, arg = classify_column(str(c))
        if kind in PER_STRATEGY and is_strategy(arg):
            found.add(arg)
    return sorted(found, key=strategy_order)


def schema_version_for(metadata: dict | None) -> int:
    """The schema version a labels file with this metadata has: 2 for a ladder of more than two models, else 1."""
    ladder = (metadata or {}).get("ladder")
    return SCHEMA_VERSION if isinstance(ladder, list) and len(ladder) > 2 else PAIR_SCHEMA_VERSION


def k_grid_in(df) -> list[int]:
    """The K values of the transfer strategies in `df` (every pair's), sorted."""
    return sorted({parse_strategy(s).keep_tokens for s in strategies_in(df) if parse_strategy(s).is_transfer} - {None})


def feature_columns(df, stages=None) -> list[str]:
    """Feature columns in `df` order; with `stages`, only those whose stages are all in `stages`
    ('prompt' is always allowed: prompt features are free)."""
    allowed = None if stages is None else {"prompt", *stages}
    out = []
    for c in df.columns:
        m = FEATURE_RE.match(str(c))
        if not m:
            continue
        needs = m.group("stages").split("+")
        if allowed is None or all(s in allowed for s in needs):
            out.append(str(c))
    return out


def failed_rows(df) -> np.ndarray:
    """Boolean mask of rows whose `error` column is set (failed samples)."""
    if ERROR_COLUMN not in df.columns:
        return np.zeros(len(df), dtype=bool)
    err = df[ERROR_COLUMN]
    return (err.notna() & (err.astype(str).str.len() > 0)).to_numpy()


def compute_labels(df, candidates) -> pd.Series:
    """Per row the cheapest correct strategy among `candidates` by `latency_ms__<s>` (ties: canonical
    order), or `none` when no candidate is correct (also for failed rows)."""
    cands = sorted(dict.fromkeys(candidates), key=strategy_order)
    if not cands:
        return pd.Series(NO_LABEL, index=df.index, dtype=object)
    ok = np.stack([df[correct_col(s)].fillna(False).to_numpy(dtype=bool) for s in cands], axis=1)
    lat = np.stack([df[latency_col(s)].to_numpy(dtype=float) for s in cands], axis=1)
    lat = np.where(ok & ~np.isnan(lat), lat, np.inf)
    best = np.argmin(lat, axis=1)  # first minimum = canonical order among equal latencies
    names = np.asarray(cands, dtype=object)[best]
    return pd.Series(np.where(ok.any(axis=1), names, NO_LABEL), index=df.index, dtype=object)


def content_hash(df) -> str:
    """sha256 over the canonical table content: columns by name, rows by sample_id, values by kind
    (numbers and bools as float64, everything else as text), so dtype changes of a parquet round trip
    (object vs str, int with nulls vs float) do not change it."""
    cols = sorted(map(str, df.columns))
    if "sample_id" in df.columns:
        df = df.sort_values("sample_id", kind="stable")
    h = hashlib.sha256(f"rows={len(df)}".encode())
    for c in cols:
        s = df[c]
        h.update(b"\x00col\x00" + c.encode())
        kind = pd.api.types.infer_dtype(s, skipna=True)
        if kind in ("boolean", "integer", "floating", "mixed-integer-float", "decimal", "empty"):
            values = pd.to_numeric(s.astype(object).where(s.notna(), np.nan), errors="coerce").to_numpy(dtype=np.float64)
            values = np.where(np.isnan(values), np.nan, values)  # one NaN bit pattern
            h.update(b"num" + values.tobytes())
        else:
            text = s.astype(object).where(s.notna(), "\x00NA").astype(str)
            h.update(b"txt" + pd.util.hash_pandas_object(text, index=False).to_numpy().tobytes())
    return h.hexdigest()


def _json_default(o):
    if hasattr(o, "item"):
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    return str(o)


def write_labels(df, path, metadata: dict | None = None) -> Path:
    """Write `df` to `path` with the `routedvlm` metadata (`schema_version_for` it and content_hash added).
    Atomic: written to a temp file in the same folder, then `os.replace`d, so an existing good file is
    never replaced by a partial one."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    meta = {**(metadata or {}), "schema_version": schema_version_for(metadata), "content_hash": content_hash(df)}
    try:
        table = pa.Table.from_pandas(df.reset_index(drop=True), preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
        raise LabelsError(f"The labels table cannot be stored as parquet: {exc}. Give each column one type.") from None
    schema_meta = dict(table.schema.metadata or {})
    schema_meta[METADATA_KEY.encode()] = json.dumps(meta, default=_json_default, sort_keys=True).encode()
    table = table.replace_schema_metadata(schema_meta)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: pq.write_table(table, tmp))
    log.info("wrote %d label rows to %s", len(df), path)
    return path


def atomic_write(path: Path, write) -> None:
    """Call `write(tmp_path)` and move the result onto `path` (same folder, so the replace is atomic; an existing
    file is never left half-written). The file gets the usual permissions (0666 minus the umask)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def labels_files(path) -> list[Path]:
    """The parquet file(s) of a labels set: one file, a folder of parquet files (what Ray, Spark or Dask write; names
    starting with '_' or '.' are skipped), or a glob pattern such as 'out/part-*.parquet'."""
    import glob

    text = str(path)
    if any(c in text for c in "*?["):
        files = [Path(f) for f in sorted(glob.glob(text, recursive=True)) if Path(f).is_file()]
    elif Path(text).is_dir():
        root = Path(text)
        files = [f for f in sorted(root.rglob("*.parquet"))
                 if not any(part.startswith(("_", ".")) for part in f.relative_to(root).parts)]
    else:
        files = [Path(text)] if Path(text).is_file() else []
    if not files:
        raise LabelsError(f"No labels file at {text!r} (no parquet file matches). Pass a labels.parquet, a folder of "
                          "parquet files or a glob; write labels with `routedvlm label ... --out FILE`.")
    return files


def _read(path) -> tuple[pd.DataFrame, dict | None, str | None]:
    """(df, metadata or None when absent, problem with the metadata or None). Several files are concatenated; their
    `routedvlm` metadata counts only when every file carries the same."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from .bounds import check_cells, check_footers, parse_metadata

    files = labels_files(path)
    try:
        check_footers(path, files)  # row count and size from the footers, before any data is read
        tables = [pq.read_table(f) for f in files]
        table = pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as exc:
        raise LabelsError(f"{str(path)!r} is not a readable parquet file ({exc}).") from None
    raws = {(t.schema.metadata or {}).get(METADATA_KEY.encode()) for t in tables}
    raw = raws.pop() if len(raws) == 1 else None
    meta, problem = (None, None) if raw is None else parse_metadata(raw, METADATA_KEY, SCHEMA_VERSION)
    check_cells(path, table)
    return table.to_pandas(), meta, problem


def read_labels(path) -> tuple[pd.DataFrame, dict]:
    """(DataFrame, metadata dict) of a labels file, folder or glob (`labels_files`); metadata is {} when absent. Does not
    validate: call `check_labels(df, metadata)` (or `validate_labels(path)`)."""
    df, meta, problem = _read(path)
    if problem:
        raise LabelsError(f"{path}: {problem}. Rewrite the file with write_labels.")
    return df, (meta or {})

