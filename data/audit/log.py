"""`AuditLog`: the shadow audits' records on disk, crash-safe like labels: each record (or a few) is one part
`<log>.parts/part-NNNNN-<sha256>.parquet` written to a temp file and renamed, so a kill (even -9) loses at most the
record being written; the parts' checksums are verified on reading (a damaged part is set aside with a warning); an
OS lock keeps a second server off the log while the first is alive. A restarted server appends to the same log.

Records (see inference/audit/shadow.py): kind 'audit' (request id, router, reference, alpha, routed strategy and
answer, reference answer, agreement, status, features; question and PNG image only with `store_inputs`) and kind
'feedback' (gold for an audited request). Without `store_inputs` the log holds answers and features, not inputs.
"""
from __future__ import annotations

import logging
import threading
from pathlib import Path

import pandas as pd

from routedvlm.errors import ConfigError, LabelsError

from ..labelling.parts import PartStore

log = logging.getLogger(__name__)
KIND = "routedvlm-audit-log"
FORMAT_VERSION = 1
SEQ = "seq"


class AuditLog:
    """A callable sink for `AuditConfig(log=...)`: `log(record)` appends it. Holds the log's lock until `close()`.

    rows_per_part: records buffered per part (1: every record is on disk before the next audit; more: fewer files,
    up to rows_per_part - 1 records lost on a kill)."""

    def __init__(self, path, *, store_inputs: bool = False, rows_per_part: int = 1):
        if isinstance(rows_per_part, bool) or not isinstance(rows_per_part, int) or rows_per_part < 1:
            raise ConfigError(f"The `rows_per_part` parameter of AuditLog must be a positive integer. Got {rows_per_part!r}.")
        self.path, self.store_inputs, self.rows_per_part = Path(path), bool(store_inputs), rows_per_part
        self.store = PartStore(self.path)
        self.store.lock.what = f"the audit log {str(self.path)!r}"
        self.store.lock.acquire()
        self.store.clean_temp()
        manifest = self.store.manifest()
        if manifest is not None and manifest.get("metadata", {}).get("kind") != KIND:
            self.store.lock.release()
            raise ConfigError(f"{str(self.store.dir)!r} holds something other than an audit log; pass another path.")
        if manifest is None:
            self.store.write_manifest({"store_inputs": self.store_inputs},
                                      {"kind": KIND, "format_version": FORMAT_VERSION})
        self._lock = threading.Lock()
        self._buffer: list[dict] = []
        self._seq = len(read_log(self.path)) if manifest is not None else 0

    def __call__(self, record: dict) -> None:
        row = dict(record)
        if not self.store_inputs:
            row["question"], row["image"] = None, None
        with self._lock:
            row[SEQ] = self._seq
            self._seq += 1
            self._buffer.append(row)
            if len(self._buffer) >= self.rows_per_part:
                self._flush()

    def _flush(self) -> None:
        rows, self._buffer = self._buffer, []
        self.store.write_part(rows)

    def close(self) -> None:
        with self._lock:
            if self._buffer:
                self._flush()
        self.store.lock.release()

    def __enter__(self) -> "AuditLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_log(path) -> pd.DataFrame:
    """Every record of an audit log (its parts folder, verified, or a parquet file of its rows), in write order."""
    path = Path(path)
    store = PartStore(path)
    if path.is_file() and not store.dir.is_dir():
        return pd.read_parquet(path)
    if not store.dir.is_dir():
        raise LabelsError(f"No audit log at {str(path)!r} (its records live in {str(store.dir)!r}); pass the path "
                          "given to --audit-log.")
    frames = [f for f in (pd.read_parquet(p) for p in store.intact_parts()) if len(f)]
    if not frames:
        return pd.DataFrame(columns=["kind", "request_id", SEQ])
    return pd.concat(frames, ignore_index=True).sort_values(SEQ, kind="stable").reset_index(drop=True)
