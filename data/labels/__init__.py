"""routedvlm.data.labels — labels.parquet (schema versions 1 and 2, DESIGN.md): columns, read/write, validation.

Names are imported lazily, so the CLI's `--help` stays free of pandas. File map: docs/layout.md.
"""
from __future__ import annotations

import importlib

_SCHEMA = (
    "SCHEMA_VERSION", "METADATA_KEY", "NO_LABEL", "BASE_COLUMNS", "LABEL_COLUMN", "ERROR_COLUMN", "answer_col",
    "correct_col", "latency_col", "tokens_col", "escalate_col", "is_feature_column", "classify_column",
    "strategies_in", "k_grid_in", "feature_columns", "failed_rows", "compute_labels", "content_hash", "write_labels",
    "labels_files", "read_labels",
)
_LAZY = {**{name: "schema" for name in _SCHEMA},
         **{name: "validate" for name in ("inspect_labels", "validate_labels", "check_labels")},
         "schema_version_for": "schema", "ladder_of": "ladder"}
__all__ = sorted(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
