"""Turn the labeller's stored rows into the labels.parquet table: schema columns, dtypes, order, `label`."""
from __future__ import annotations

import numpy as np
import pandas as pd

from routedvlm.router.strategies import parse_strategy
from ..labels.schema import (
    BASE_COLUMNS, ERROR_COLUMN, LABEL_COLUMN, answer_col, compute_labels, correct_col, escalate_col, is_feature_column,
    latency_col, tokens_col,
)

METRIC_COLUMN = "_metric"  # the scorer of each row; parts only (collected into the metadata's `scorers`)


def _text(s: pd.Series) -> pd.Series:
    return s.astype(object).where(s.notna(), None).map(lambda v: v if v is None else str(v))


def _ensure(df: pd.DataFrame, name: str, fill) -> None:
    if name not in df.columns:
        df[name] = fill


def schema_columns(df: pd.DataFrame, strategies) -> list[str]:
    """The column order: base, per strategy (answer, correct, latency, tokens), escalate, features, label, error."""
    cols = list(BASE_COLUMNS)
    for s in strategies:
        cols += [answer_col(s), correct_col(s), latency_col(s), tokens_col(s)]
    cols += [escalate_col(s) for s in strategies if parse_strategy(s).is_transfer]
    cols += [c for c in df.columns if is_feature_column(str(c))]
    return cols + [LABEL_COLUMN, ERROR_COLUMN]


def build_table(rows: pd.DataFrame, strategies) -> pd.DataFrame:
    """Schema-v1 table from stored rows: missing cells of failed rows filled (answer None, correct False,
    numbers NaN), dtypes fixed, private `_` columns dropped, `label` computed over `strategies`."""
    df = rows.copy()
    for c in BASE_COLUMNS:
        _ensure(df, c, None)
    for s in strategies:
        _ensure(df, answer_col(s), None)
        _ensure(df, correct_col(s), False)
        _ensure(df, latency_col(s), np.nan)
        _ensure(df, tokens_col(s), np.nan)
        if parse_strategy(s).is_transfer:
            _ensure(df, escalate_col(s), np.nan)
    _ensure(df, ERROR_COLUMN, None)
    for c in (*BASE_COLUMNS, ERROR_COLUMN, *(answer_col(s) for s in strategies)):
        df[c] = _text(df[c])
    for s in strategies:
        df[correct_col(s)] = df[correct_col(s)].astype(object).where(df[correct_col(s)].notna(), False).astype(bool)
        df[latency_col(s)] = df[latency_col(s)].astype(float)
        tokens = df[tokens_col(s)].astype(float)
        df[tokens_col(s)] = tokens.astype("int64") if not tokens.isna().any() else tokens
        if parse_strategy(s).is_transfer:
            df[escalate_col(s)] = df[escalate_col(s)].astype(float)
    for c in df.columns:
        if is_feature_column(str(c)):
            df[c] = df[c].astype(float)
    df[LABEL_COLUMN] = compute_labels(df, strategies).astype(object)
    return df[schema_columns(df, strategies)].reset_index(drop=True)


def scorers_of(rows: pd.DataFrame) -> dict:
    """{dataset: metric} (a sorted list when one data set used several) from the stored rows."""
    if METRIC_COLUMN not in rows.columns or "dataset" not in rows.columns:
        return {}
    out = {}
    for name, group in rows.dropna(subset=[METRIC_COLUMN]).groupby("dataset"):
        metrics = sorted(set(group[METRIC_COLUMN].astype(str)))
        out[str(name)] = metrics[0] if len(metrics) == 1 else metrics
    return out
