"""routedvlm.data.labelling — `routedvlm label`: run both VLMs on a data set and write labels.parquet.

Modules: `cli` (the command), `config` (`LabelConfig`, its flags), `job` (one run per output: lock, resume, finish),
`samples` (per-sample work: source, pipeline, score, features, metadata), `runner` (samples in flight), `ray_pool`
(`--ray`), `parts` + `lock` (crash-safe parts, one run per output), `table` + `latency` (rows → the labels table,
standalone latencies), `metadata`, `merge` (`label merge`). Exports `run_labelling`, `LabelConfig`, `LabelSummary`
(imported lazily, so the CLI's `--help` stays free of pandas and torch).
"""
from __future__ import annotations

import importlib

_LAZY = {"run_labelling": "job", "LabelConfig": "config", "LabelSummary": "samples"}
__all__ = sorted(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
