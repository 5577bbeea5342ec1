"""Validation of labels.parquet (schema versions 1 and 2): every problem of a table or file, reported at once.

Failed rows (an `error` value) are excluded from the value checks; sample ids are checked on every row, and two ids
equal after NFKC normalisation and removing zero-width characters (`same` / `same\u200b`) are refused as lookalike
duplicates. Metadata that is present but not a readable JSON object is a problem in every mode.
Latencies and token counts must be finite, >= 0 and below MAX_MEASUREMENT; features finite or NaN (missing).
A DataFrame given without metadata skips the metadata checks; a file without metadata is a problem when `strict`
(`labels validate --strict`, the library default). Not strict (train-router, `labels validate`), the metadata
problems of a table another tool wrote or filtered (no `routedvlm` metadata, a stale content hash, a K grid or
candidates the columns no longer match) are warnings: the table itself must still follow the schema.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from routedvlm.errors import LabelsError, UnknownStrategyError, one_of
from routedvlm.router.strategies import is_feature_stage, feature_stages, is_strategy, parse_strategy
from .schema import (
    BASE_COLUMNS, LABEL_COLUMN, METADATA_KEY, NO_LABEL, PER_STRATEGY, SCHEMA_VERSION, _read, classify_column,
    compute_labels, content_hash, escalate_col, failed_rows, k_grid_in, schema_version_for, strategies_in,
)
from .ladder import ladder_problems, version_of
from ..sample import TASK_TYPES
from .bounds import id_key

MAX_EXAMPLES = 3
MAX_MEASUREMENT = 1e9  # ms (11.6 days) or tokens: a latency or token count above this is not a measurement
COSTS = ("latency_ms", "escalate", "output_tokens")
KIND_DTYPE = {"answer": "string", "correct": "bool", "latency_ms": "float", "output_tokens": "int",
              "escalate": "float", "feature": "float", "base": "string", "label": "string", "error": "string"}


def _examples(ids) -> str:
    ids = [str(i) for i in ids]
    more = f" and {len(ids) - MAX_EXAMPLES} more" if len(ids) > MAX_EXAMPLES else ""
    return ", ".join(repr(i) for i in ids[:MAX_EXAMPLES]) + more


def _dtype_ok(s: pd.Series, want: str) -> bool:
    non_null = s.dropna()
    if want == "string":
        return pd.api.types.is_string_dtype(s.dtype) and all(isinstance(v, str) for v in non_null)
    if want == "bool":
        if pd.api.types.is_bool_dtype(s.dtype):
            return True
        return s.dtype == object and all(isinstance(v, (bool, np.bool_)) for v in non_null)
    if want == "int":
        if pd.api.types.is_integer_dtype(s.dtype) and not pd.api.types.is_bool_dtype(s.dtype):
            return True  # float with nulls: an int column after a round trip with failed rows
        if not pd.api.types.is_float_dtype(s.dtype):
            return False
        with np.errstate(invalid="ignore"):  # inf: not an integer (and reported as infinite)
            return bool(np.all(np.mod(non_null.to_numpy(float), 1) == 0))
    return pd.api.types.is_float_dtype(s.dtype)


def _column_problems(df) -> list[str]:
    out, cols = [], [str(c) for c in df.columns]
    missing = [c for c in (*BASE_COLUMNS, LABEL_COLUMN) if c not in cols]
    if missing:
        out.append(f"missing required column(s) {missing}")
    for c in cols:
        kind, arg = classify_column(c)
        if kind == "unknown":
            out.append(f"extra column {c!r}: not part of the labels schema (remove or rename it)")
        elif kind in PER_STRATEGY and not is_strategy(arg):
            out.append(f"column {c!r} names unknown strategy id {arg!r}; use ids such as 'large_direct' or 'transfer_64'")
        elif kind == "feature":
            try:
                feature_stages(c)
            except UnknownStrategyError as exc:
                out.append(f"column {c!r}: {exc}")
        if kind != "unknown" and not (kind in PER_STRATEGY and not is_strategy(arg)):
            want = KIND_DTYPE[kind]
            if not _dtype_ok(df[c], want):
                out.append(f"column {c!r} must have dtype {want}, got {df[c].dtype}")
    return out


def _strategy_problems(df) -> list[str]:
    out, cols = [], set(map(str, df.columns))
    strategies = strategies_in(df)
    for s in strategies:
        absent = [f"{p}__{s}" for p in PER_STRATEGY if f"{p}__{s}" not in cols]
        if absent:
            out.append(f"strategy {s!r} is incomplete: missing column(s) {absent}")
        if s.startswith("transfer_") and escalate_col(s) not in cols:
            out.append(f"strategy {s!r} lacks its two-stage increment column {escalate_col(s)!r}")
    for c in sorted(cols):
        kind, arg = classify_column(c)
        if kind == "escalate" and (not is_strategy(f"transfer_{arg}") or
                                   parse_strategy(f"transfer_{arg}").id not in strategies):
            out.append(f"column {c!r} has no matching strategy 'transfer_{arg}' columns")
        if kind == "feature":
            unrun = [st for st in arg.split("+") if st != "prompt" and is_feature_stage(st) and st not in strategies]
            if unrun:
                out.append(f"feature {c!r} needs stage(s) {unrun}, which have no strategy columns")
    return out


def _row_problems(df, ok: np.ndarray) -> list[str]:
    out = []
    if len(df) == 0:
        return ["the table is empty (0 rows): label some samples first"]
    if not ok.any():
        out.append(f"no usable rows: all {len(df)} row(s) are failed samples (`error` is set)")
    if "sample_id" in df.columns:
        sid = df["sample_id"]
        empty = sid.isna() | (sid.astype(str).str.strip() == "")
        if empty.any():
            out.append(f"{int(empty.sum())} row(s) have an empty sample_id (row positions {_examples(np.flatnonzero(empty))})")
        dup = sid[sid.duplicated(keep=False) & ~empty]
        if len(dup):
            out.append(f"duplicate sample_id value(s) {_examples(sorted(set(dup.astype(str))))}")
        keys = sid[~empty].astype(str).map(id_key)
        alike = sid[~empty][keys.duplicated(keep=False) & ~sid[~empty].duplicated(keep=False)]
        if len(alike):
            out.append(f"lookalike sample_id value(s) {_examples(sorted(set(alike.astype(str))))}: "
                       "equal after NFKC normalisation and removing zero-width characters; give them distinct ids")
    rows = df[ok]
    ids = rows["sample_id"] if "sample_id" in rows.columns else pd.Series(rows.index, index=rows.index)
    for c in map(str, rows.columns):
        kind, arg = classify_column(c)
        if kind in ("error", "unknown") or (kind in PER_STRATEGY and not is_strategy(arg)):
            continue
        if kind == "feature":
            out += _feature_values(rows[c], c, ids)
            continue
        nan = rows[c].isna().to_numpy()
        if nan.any():
            out.append(f"column {c!r} has {int(nan.sum())} missing value(s) in rows without an error "
                       f"(sample_id {_examples(ids[nan])})")
        if kind in COSTS and pd.api.types.is_numeric_dtype(rows[c].dtype) and not pd.api.types.is_bool_dtype(rows[c].dtype):
            out += _cost_values(rows[c].to_numpy(dtype=float), c, ids)
    return out + _value_set_problems(rows, ids)


def _cost_values(v: np.ndarray, c: str, ids) -> list[str]:
    """Latencies and token counts: finite, >= 0 and not absurdly large (NaN is reported as missing)."""
    out = []
    for mask, what in ((np.isinf(v), "infinite"), (v < 0, "negative"),
                       (np.isfinite(v) & (v > MAX_MEASUREMENT), f"absurd (> {MAX_MEASUREMENT:g})")):
        if mask.any():
            out.append(f"column {c!r} has {int(mask.sum())} {what} value(s) (sample_id {_examples(ids[mask])}); "
                       "latencies and token counts must be finite numbers >= 0")
    return out


def _feature_values(s: pd.Series, c: str, ids) -> list[str]:
    """Features: NaN is a missing value (allowed), +-inf is not a value."""
    if not pd.api.types.is_numeric_dtype(s.dtype) or pd.api.types.is_bool_dtype(s.dtype):
        return []  # reported by the dtype check
    inf = np.isinf(s.to_numpy(dtype=float))
    if not inf.any():
        return []
    return [f"feature column {c!r} has {int(inf.sum())} infinite value(s) in {len(s)} row(s) (sample_id "
            f"{_examples(ids[inf])}); features must be finite (NaN marks a missing value)"]


def _value_set_problems(rows, ids) -> list[str]:
    out = []
    if "task_type" in rows.columns:
        bad = rows["task_type"].notna() & ~rows["task_type"].isin(TASK_TYPES)
        if bad.any():
            out.append(f"unknown task_type value(s) {_examples(sorted(set(rows['task_type'][bad].astype(str))))}; "
                       f"valid are {one_of(TASK_TYPES)}")
    if "reference" in rows.columns:
        bad = [i for i, v in zip(ids, rows["reference"]) if isinstance(v, str) and not _is_json(v)]
        if bad:
            out.append(f"column 'reference' must hold JSON strings; {len(bad)} row(s) do not (sample_id {_examples(bad)})")
    return out


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True


def _label_problems(df, ok: np.ndarray, candidates: list[str]) -> list[str]:
    if LABEL_COLUMN not in df.columns:
        return []
    rows = df[ok]
    valid = set(strategies_in(df)) | {NO_LABEL}
    unknown = rows[LABEL_COLUMN].notna() & ~rows[LABEL_COLUMN].isin(valid)
    out = []
    if unknown.any():
        out.append(f"'label' value(s) {_examples(sorted(set(rows[LABEL_COLUMN][unknown].astype(str))))} are not "
                   f"strategies of this file or {NO_LABEL!r}")
    usable = all(f"{p}__{s}" in df.columns for s in candidates for p in ("correct", "latency_ms"))
    if not usable or not candidates:
        return out
    try:
        expected = compute_labels(rows, candidates)
    except (TypeError, ValueError):
        return out  # dtype problems are reported elsewhere
    wrong = (rows[LABEL_COLUMN].astype(object) != expected) & rows[LABEL_COLUMN].notna() & ~unknown
    if wrong.any():
        ids = rows["sample_id"][wrong] if "sample_id" in rows.columns else rows.index[wrong]
        out.append(f"'label' contradicts the correctness and latency columns in {int(wrong.sum())} row(s) "
                   f"(sample_id {_examples(ids)}): it must be the cheapest correct candidate by latency_ms__, "
                   f"or {NO_LABEL!r}; recompute it with compute_labels")
    return out


def _metadata_problems(df, meta: dict | None) -> tuple[list[str], list[str] | None]:
    """(problems, candidates named by the metadata or None)."""
    if not meta:
        return [f"metadata '{METADATA_KEY}' is missing; write the file with routedvlm.data.labels.write_labels"], None
    out = []
    want = schema_version_for(meta)
    if meta.get("schema_version") != want:
        kind = "a ladder of more than two models" if want == SCHEMA_VERSION else "a pair (no `ladder` of 3+ models)"
        out.append(f"metadata schema_version must be {want}, got {meta.get('schema_version')!r} (for {kind})")
    out += ladder_problems(df, meta)
    if "content_hash" not in meta:
        out.append("metadata has no content_hash; write the file with write_labels")
    elif meta["content_hash"] != content_hash(df):
        out.append("bad content hash: the table changed after it was written (metadata content_hash does not "
                   "match); rewrite it with write_labels")
    k_grid = meta.get("k_grid")
    if k_grid is not None:
        ks = k_grid_in(df)
        if not isinstance(k_grid, list) or sorted(k_grid) != ks:
            out.append(f"metadata k_grid {k_grid!r} does not match the transfer_<K> columns (K = {ks})")
    cands = meta.get("candidates")
    if cands is not None:
        bad = [c for c in cands if c not in strategies_in(df)] if isinstance(cands, list) else cands
        if bad:
            out.append(f"metadata candidates {bad!r} are not strategies of this file")
            cands = None
    return out, cands


def inspect_labels(df_or_path, metadata: dict | None = None, *, strict: bool = True) -> tuple[list[str], list[str]]:
    """(problems, warnings) of a labels table or file. For a path the file's own metadata is used; for a DataFrame,
    `metadata` is checked when given. Not `strict`, metadata problems are warnings (see the module docstring)."""
    return _inspect(df_or_path, metadata, strict)[:2]


def _inspect(df_or_path, metadata, strict) -> tuple[list[str], list[str], int]:
    problems, meta_problems = [], []
    if isinstance(df_or_path, (str, Path)):
        df, file_meta, meta_problem = _read(df_or_path)
        if meta_problem:  # metadata present but unreadable: refused in every mode (train-router refuses it too)
            problems.append(meta_problem)
        elif metadata is None:
            metadata = file_meta
        check_meta = not meta_problem
    else:
        df, check_meta = df_or_path, metadata is not None
    if not isinstance(df, pd.DataFrame):
        raise LabelsError(f"validate_labels takes a DataFrame or a path. Got {type(df).__name__}.")
    problems += _column_problems(df) + _strategy_problems(df)
    ok = ~failed_rows(df)
    problems += _row_problems(df, ok)
    candidates = None
    if check_meta:
        found, candidates = _metadata_problems(df, metadata)
        meta_problems += found
    problems += _label_problems(df, ok, candidates or strategies_in(df))
    version = version_of(df, metadata)
    return (problems + meta_problems, [], version) if strict else (problems, meta_problems, version)


def validate_labels(df_or_path, metadata: dict | None = None, *, strict: bool = True) -> list[str]:
    """Every problem of a labels table or file, one message each; [] when valid (see `inspect_labels`)."""
    return inspect_labels(df_or_path, metadata, strict=strict)[0]


def check_labels(df_or_path, metadata: dict | None = None, *, strict: bool = True) -> list[str]:
    """Raise LabelsError listing every problem when the labels are invalid; returns the warnings."""
    problems, warnings, version = _inspect(df_or_path, metadata, strict)
    if problems:
        name = f"{df_or_path}" if isinstance(df_or_path, (str, Path)) else "The labels table"
        notes = [f"warning: {w}" for w in warnings]
        raise LabelsError(f"{name} does not follow labels schema version {version} "
                          f"({len(problems)} problem(s)):\n  - " + "\n  - ".join(problems + notes))
    return warnings
