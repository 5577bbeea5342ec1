"""routedvlm.data.labelling — `routedvlm label`: run both VLMs on a data set and write labels.parquet.

Names are imported lazily, so the CLI's `--help` stays free of pandas and torch. File map: docs/layout.md.
"""
from __future__ import annotations

import importlib

_LAZY = {"run_labelling": "job", "LabelConfig": "config", "LabelSummary": "job"}
__all__ = sorted(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
