"""`AuditLog`: the shadow audits' records on disk, crash-safe like labels, appended in batches: records are
buffered and written as one part `<log>.parts/part-NNNNN-<sha256>.parquet` (temp file + rename) once
`rows_per_part` records wait or `flush_seconds` passed since the first of them (a timer flushes a quiet server too),
so a kill (even -9) loses at most the records not yet flushed; `flush()` / `close()` write them now. The parts'
checksums are verified on reading (a damaged part is set aside with a warning); an OS lock keeps a second writer
off a log while the first is alive. A restarted server appends, reading only its newest intact part (for the next
sequence number), not the whole log.

Replicas: `AuditLog(path, replica="a")` writes its own parts folder `<log>.replica-a.parts` (its own lock) and tags
each record with `replica`, so several servers behind one load balancer share a log path; `read_log(path)` merges
the plain log and every replica's, ordered by time (`routedvlm audit report` replays the merge).

Records (see inference/audit/shadow.py): kind 'audit' (request id, router, reference, alpha, routed strategy and
answer, reference answer, agreement, status, features; question and PNG image only with `store_inputs`) and kind
'feedback' (gold for an audited request). Without `store_inputs` the log holds answers and features, not inputs.
"""
from __future__ import annotations

import logging
import re
import threading
from pathlib import Path

import pandas as pd

from routedvlm.errors import ConfigError, LabelsError

from ..labelling.parts import PartStore

log = logging.getLogger(__name__)
KIND = "routedvlm-audit-log"
FORMAT_VERSION = 2  # 2: batched parts, replicas
SEQ = "seq"
REPLICA = "replica"
_REPLICA_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def replica_path(path, replica: str | None) -> Path:
    """The log path a replica writes (`<log>.replica-<id>`; the log itself for None)."""
    path = Path(path)
    if replica is None:
        return path
    if not isinstance(replica, str) or not _REPLICA_RE.match(replica):
        raise ConfigError(f"The audit log's `replica` id must be 1 to 64 letters, digits, '_', '.' or '-', starting "
                          f"with a letter or digit (e.g. the pod name). Got {replica!r} instead.")
    return path.with_name(f"{path.name}.replica-{replica}")


class AuditLog:
    """A callable sink for `AuditConfig(log=...)`: `log(record)` appends it. Holds the log's lock until `close()`.

    rows_per_part: records per part (1: every record is on disk before the next audit); flush_seconds: the longest a
    record waits in the buffer (0: only `rows_per_part` and `close()` flush); replica: this writer's id when several
    servers share `path` (see the module docstring)."""

    def __init__(self, path, *, store_inputs: bool = False, rows_per_part: int = 256, flush_seconds: float = 5.0,
                 replica: str | None = None):
        if isinstance(rows_per_part, bool) or not isinstance(rows_per_part, int) or rows_per_part < 1:
            raise ConfigError(f"The `rows_per_part` parameter of AuditLog must be a positive integer. Got {rows_per_part!r}.")
        if isinstance(flush_seconds, bool) or not isinstance(flush_seconds, (int, float)) or not 0 <= flush_seconds < 1e6:
            raise ConfigError(f"The `flush_seconds` parameter of AuditLog must be a number of seconds >= 0. "
                              f"Got {flush_seconds!r}.")
        self.path, self.store_inputs, self.rows_per_part = Path(path), bool(store_inputs), rows_per_part
        self.replica, self.flush_seconds = replica, float(flush_seconds)
        self.store = PartStore(replica_path(self.path, replica))
        self.store.lock.what = f"the audit log {str(self.store.out)!r}"
        self.store.lock.acquire()
        self.store.clean_temp()
        manifest = self.store.manifest()
        if manifest is not None and manifest.get("metadata", {}).get("kind") != KIND:
            self.store.lock.release()
            raise ConfigError(f"{str(self.store.dir)!r} holds something other than an audit log; pass another path.")
        if manifest is None:
            self.store.write_manifest({"store_inputs": self.store_inputs},
                                      {"kind": KIND, "format_version": FORMAT_VERSION, "replica": replica})
        self._lock = threading.Lock()
        self._buffer: list[dict] = []
        self._timer: threading.Timer | None = None
        self._seq = _next_seq(self.store) if manifest is not None else 0

    def __call__(self, record: dict) -> None:
        row = dict(record)
        if not self.store_inputs:
            row["question"], row["image"] = None, None
        if self.replica is not None:
            row[REPLICA] = self.replica
        with self._lock:
            row[SEQ] = self._seq
            self._seq += 1
            self._buffer.append(row)
            if len(self._buffer) >= self.rows_per_part:
                self._flush()
            elif self._timer is None and self.flush_seconds:
                self._timer = threading.Timer(self.flush_seconds, self.flush)
                self._timer.daemon = True
                self._timer.start()

    def flush(self) -> None:
        """Write the buffered records now."""
        with self._lock:
            self._flush()

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        rows, self._buffer = self._buffer, []
        if rows:
            self.store.write_part(rows)

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self.store.lock.release()

    def __enter__(self) -> "AuditLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _next_seq(store: PartStore) -> int:
    """One past the highest sequence number stored: read from the newest intact part only."""
    for part in reversed(store.part_files()):
        if store._intact(part):
            seq = pd.read_parquet(part, columns=[SEQ])[SEQ]
            if len(seq):
                return int(seq.max()) + 1
    return 0


def log_stores(path) -> list[PartStore]:
    """The parts folders of a log: its own and every replica's (`<log>.replica-<id>.parts`), sorted by name."""
    path = Path(path)
    stores = [PartStore(path)]
    if path.parent.is_dir():
        prefix = f"{path.name}.replica-"
        stores += [PartStore(p.with_name(p.name[:-len(".parts")])) for p in sorted(path.parent.glob(prefix + "*.parts"))
                   if p.is_dir() and _REPLICA_RE.match(p.name[len(prefix):-len(".parts")])]
    return [s for s in stores if s.dir.is_dir()]


def read_log(path) -> pd.DataFrame:
    """Every record of an audit log (its parts folders, verified and merged across replicas, or a parquet file of its
    rows): one writer's in write order, several merged by time."""
    path = Path(path)
    stores = log_stores(path)
    if path.is_file() and not stores:
        return pd.read_parquet(path)
    if not stores:
        raise LabelsError(f"No audit log at {str(path)!r} (its records live in {str(PartStore(path).dir)!r} or "
                          f"{path.name}.replica-<id>.parts); pass the path given to --audit-log.")
    merged = []
    for store in stores:
        frames = [f for f in (pd.read_parquet(p) for p in store.intact_parts()) if len(f)]
        if frames:
            df = pd.concat(frames, ignore_index=True).sort_values(SEQ, kind="stable")
            merged.append(df.drop_duplicates(subset=[SEQ], keep="first"))
    if not merged:
        return pd.DataFrame(columns=["kind", "request_id", SEQ])
    if len(merged) == 1:
        return merged[0].reset_index(drop=True)
    df = pd.concat(merged, ignore_index=True)
    return df.sort_values("time", kind="stable").reset_index(drop=True)
