"""Boundary checks of `routedvlm labels import-outcomes`: every value of the outcome table and every flag is checked
before anything is computed or written, and the first problem is one line naming the row, column or flag and the fix
(outcomes.py calls `check_flags` and `check_table`; the labels it builds are validated again before writing).

Refused: an empty table; a cost that is missing, non-numeric, negative, infinite or above `MAX_COST`; duplicate
or lookalike sample ids (equal after NFKC normalisation and removing zero-width characters); a prompt longer than
`MAX_PROMPT_CHARS`; `--min-score` outside (0, 1] or NaN; a `--ms-per-token` price that is not a finite number > 0
and at most `MAX_MS_PER_TOKEN`.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from routedvlm.errors import ConfigError, LabelsError

from .bounds import id_key

MAX_COST = 1e9  # the labels' MAX_MEASUREMENT: a cost above this is not a measurement
MAX_PROMPT_CHARS = 100_000
MAX_MS_PER_TOKEN = 1e6


def _finite_number(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def check_flags(min_score, ms_per_token: dict | None) -> None:
    """`--min-score` and `--ms-per-token` against their meaning."""
    if not _finite_number(min_score) or not 0 < min_score <= 1:
        raise ConfigError(f"`--min-score` must be a number in (0, 1] (a RouterBench score counts as correct from it). "
                          f"Got {min_score!r} instead; the default is 0.5.")
    for name, price in (ms_per_token or {}).items():
        if not _finite_number(price) or not 0 < price <= MAX_MS_PER_TOKEN:
            raise ConfigError(f"`--ms-per-token` {name}={price!r}: a price must be a finite number of milliseconds per "
                              f"token in (0, {MAX_MS_PER_TOKEN:g}], e.g. 'small=10,large=30'.")


def check_table(df: pd.DataFrame, layout: str, cost_columns: list[str], prompt_column: str) -> None:
    """The outcome table's values: rows, costs, ids and prompts (see the module docstring)."""
    if len(df) == 0:
        raise LabelsError("The outcome table is empty (0 rows); nothing to import. Check the file and the --layout.")
    for col in cost_columns:
        _check_costs(df[col], col)
    if layout == "routerbench" and "sample_id" in df.columns:
        _check_ids(df["sample_id"])
    lengths = df[prompt_column].map(lambda v: len(v) if isinstance(v, str) else len(str(v))).to_numpy()
    long = np.flatnonzero(lengths > MAX_PROMPT_CHARS)
    if len(long):
        row = int(long[0])
        raise LabelsError(f"Row {row}, column {prompt_column!r}: a prompt of {int(lengths[row])} characters (limit "
                          f"{MAX_PROMPT_CHARS}); drop or shorten that row ({len(long)} row(s) like it).")


def _check_costs(series: pd.Series, col: str) -> None:
    values = pd.to_numeric(series, errors="coerce").to_numpy(dtype=float)
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(values) | (values < 0) | (values > MAX_COST)
    if bad.any():
        row = int(np.argmax(bad))
        value = series.iloc[row]
        value = value.item() if hasattr(value, "item") else value  # 'nan', not 'np.float64(nan)'
        raise LabelsError(f"Row {row}, column {col!r}: cost {value!r} is not a cost; costs must be finite "
                          f"numbers in [0, {MAX_COST:g}] ({int(bad.sum())} row(s) like it). Fix or drop those rows.")


def _check_ids(ids: pd.Series) -> None:
    text = ids.astype(str)
    empty = ids.isna() | (text.str.strip() == "")
    if empty.any():
        raise LabelsError(f"Row {int(np.argmax(empty.to_numpy()))}, column 'sample_id': empty id; every row needs one.")
    dup = text.duplicated()
    if dup.any():
        row = int(np.argmax(dup.to_numpy()))
        first = int(np.flatnonzero((text == text.iloc[row]).to_numpy())[0])
        raise LabelsError(f"Row {row}, column 'sample_id': {text.iloc[row]!r} repeats row {first}; ids must be "
                          "unique (drop the duplicate rows).")
    keys = text.map(id_key)
    alike = keys.duplicated()
    if alike.any():
        row = int(np.argmax(alike.to_numpy()))
        first = int(np.flatnonzero((keys == keys.iloc[row]).to_numpy())[0])
        raise LabelsError(f"Row {row}, column 'sample_id': {text.iloc[row]!r} looks like {text.iloc[first]!r} (row "
                          f"{first}) once normalised (NFKC, zero-width characters removed); give them distinct ids.")
