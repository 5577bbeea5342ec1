"""`routedvlm label merge`: join the labels files of several shards (`--shard I/N`) of one run into one file.

The files must come from the same run settings (ladder, models, strategies, K grid, selector, prompts, generation,
threshold, latency source, sample source) and hold disjoint sample ids; each is validated first.
"""
from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from routedvlm.errors import ConfigError, LabelsError
from ..labels.schema import ERROR_COLUMN, read_labels, write_labels
from ..labels.validate import check_labels

log = logging.getLogger(__name__)
MUST_MATCH = ("ladder", "models", "strategies", "k_grid", "selector", "prompts", "prompt_template", "generation", "threshold",
              "execution_mode",
              "latency_source", "cost_profile_sha256", "sample_source", "schema_version")


def _check_compatible(metas: list[dict], files: list[str]) -> None:
    problems = []
    for key in MUST_MATCH:
        first = metas[0].get(key)
        for meta, name in zip(metas[1:], files[1:]):
            if meta.get(key) != first:
                problems.append(f"{key!r} differs between {files[0]} and {name}")
    if problems:
        raise LabelsError("These labels files come from different runs and cannot be merged: "
                          + "; ".join(problems) + ". Merge only the shards of one run.")


def _check_disjoint(frames: list[pd.DataFrame]) -> None:
    ids = pd.concat([f["sample_id"] for f in frames], ignore_index=True)
    dup = sorted(set(ids[ids.duplicated()].astype(str)))
    if dup:
        raise LabelsError(f"{len(dup)} sample id(s) appear in more than one file (first: {dup[:3]}); "
                          "merge the shards of one run, each once.")


def _shards_note(metas: list[dict]) -> None:
    shards = [m.get("shard") for m in metas]
    counts = {int(s.split("/")[1]) for s in shards if s}
    if len(counts) == 1:
        n = counts.pop()
        have = {int(s.split("/")[0]) for s in shards if s}
        missing = sorted(set(range(n)) - have)
        if missing:
            log.warning("merging %d of %d shards: shard(s) %s missing", len(have), n, missing)


def merge_label_files(out, files, *, overwrite: bool = False) -> pd.DataFrame:
    """Validate, check and concatenate labels files into `out` (refuses to overwrite unless `overwrite`)."""
    from routedvlm.router.provenance import now_iso

    files = [str(f) for f in files]
    if not files:
        raise ConfigError("`label merge` needs at least one labels file to merge.")
    if Path(out).exists() and not overwrite:
        raise ConfigError(f"{out} already exists; remove it or pass --overwrite.")
    frames, metas = [], []
    for f in files:
        df, meta = read_labels(f)
        check_labels(df, meta)
        frames.append(df)
        metas.append(meta)
    _check_compatible(metas, files)
    _check_disjoint(frames)
    _shards_note(metas)
    merged = pd.concat(frames, ignore_index=True)[list(frames[0].columns)]
    meta = {k: v for k, v in metas[0].items() if k != "content_hash"}
    scorers = {}
    for m in metas:
        scorers.update(m.get("scorers") or {})
    meta.update(
        shard=None, scorers=scorers, n_samples=len(merged), merged_at=now_iso(),
        n_errors=int(merged[ERROR_COLUMN].notna().sum()) if ERROR_COLUMN in merged.columns else 0,
        merged_from=[{"file": f, "shard": m.get("shard"), "n_samples": m.get("n_samples"),
                      "content_hash": m.get("content_hash")} for f, m in zip(files, metas)],
    )
    if isinstance(meta.get("run_settings"), dict):
        meta["run_settings"] = {**meta["run_settings"], "shard": None}
    write_labels(merged, out, meta)
    return merged
