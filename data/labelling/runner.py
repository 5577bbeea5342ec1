"""Run the labeller's per-sample code over the samples to do, with up to `--concurrency` samples in flight.

Samples go through a thread pool that never holds more than N at once; finished rows are stored as parts every
`flush_every` samples (or FLUSH_SECONDS), so an interrupt loses at most the N in flight, which `--resume` redoes.
Within a sample the strategies share work exactly as in a serial run (`run_many`). Local models serve one sample
at a time (a lock around `run_many`: transformers' generate does not batch and the models hold per-call state),
so with local sides concurrency only overlaps data loading and scoring; servers take N requests at once, and so do
in-process engines ('vllm:<folder>'): every stage call of the N samples in flight goes to the engine's driver thread,
which adds it to the running batch (continuous batching, `inference/sides/vllm/driver.py`), so each stage of the
strategy grid runs for many samples at once. `label_unit` labels one list of samples and returns its rows (a Ray
actor's unit). `latency_source` says what `latency_ms__` means for a run (DESIGN.md: standalone, or batched times).
"""
from __future__ import annotations

import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

from .config import requests_in_flight

FLUSH_SECONDS = 120.0
WALL_CLOCK, BATCHED, COST_MODEL = "wall-clock", "batched-wall-clock", "cost-model"


def has_stateful_side(pipe) -> bool:
    """Whether a side holds per-call state (`ModelSide.stateful`, e.g. a local model): then samples take turns."""
    return any(side.stateful for side in pipe.sides.values())


def latency_source(cfg, remote: bool) -> str:
    """'cost-model' with --cost; 'batched-wall-clock' when servers answer several samples at once; else 'wall-clock'
    (one request in flight per model: the measured time is the standalone latency)."""
    if cfg.cost is not None:
        return COST_MODEL
    n = requests_in_flight(cfg, remote)
    return WALL_CLOCK if n == 1 else BATCHED


class RowSink:
    """Collects finished rows, stores them as a part every `every` rows (or FLUSH_SECONDS), counts errors."""

    def __init__(self, store, every: int, total: int, progress: bool, desc: str = "labelling"):
        from tqdm.auto import tqdm

        self.store, self.every, self.buf, self.errors, self.done = store, every, [], 0, 0
        self.last = time.monotonic()
        self.bar = tqdm(total=total, unit="sample", desc=desc, file=sys.stderr, disable=not progress,
                        dynamic_ncols=True, smoothing=0.1)

    def add(self, rows, **postfix) -> None:
        from ..labels.schema import ERROR_COLUMN

        for row in rows:
            self.errors += row.get(ERROR_COLUMN) is not None
            self.buf.append(row)
        self.done += len(rows)
        self.bar.update(len(rows))
        self.bar.set_postfix(errors=self.errors, **postfix, refresh=False)
        if len(self.buf) >= self.every or time.monotonic() - self.last > FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        rows, self.buf = self.buf, []
        self.last = time.monotonic()
        self.store.write_part(rows)

    def close(self) -> None:
        try:
            self.flush()  # finished samples survive an interrupt
        finally:
            self.bar.close()


class _Serialised:
    """A pipeline view whose `run_many` holds a lock: one sample at a time on local models."""

    def __init__(self, pipe):
        self._pipe, self._lock = pipe, threading.Lock()

    def __getattr__(self, name):
        return getattr(self._pipe, name)

    def run_many(self, *args, **kwargs):
        with self._lock:
            return self._pipe.run_many(*args, **kwargs)


def label_rows(pipe, cfg, todo, load, stage_ms, on_row, stop: threading.Event | None = None) -> None:
    """Label `todo` [(position, sample_id)] with up to cfg.concurrency in flight, calling `on_row(row)` in this
    thread as each finishes (any order). `stop`, once set, keeps queued samples from starting."""
    from .per_sample import process

    n = max(1, min(int(cfg.concurrency), len(todo)))
    if n == 1:
        for position, sample_id in todo:
            on_row(process(pipe, cfg, position, sample_id, load, load.dataset_name, stage_ms))
        return
    view = _Serialised(pipe) if has_stateful_side(pipe) else pipe
    overlap = getattr(pipe, "overlap_calls", False)
    if view is pipe:  # latencies are batched anyway: a sample's independent calls go out at once (inference/overlap.py)
        pipe.overlap_calls = True
    try:
        _in_flight(view, cfg, todo, load, stage_ms, on_row, stop or threading.Event(), n)
    finally:
        pipe.overlap_calls = overlap


def _in_flight(view, cfg, todo, load, stage_ms, on_row, stop, n) -> None:
    from .per_sample import process

    def work(item):
        return None if stop.is_set() else process(view, cfg, item[0], item[1], load, load.dataset_name, stage_ms)

    pool, items = ThreadPoolExecutor(n, thread_name_prefix="routedvlm-label"), iter(todo)
    pending = set()
    try:
        for item in items:
            pending.add(pool.submit(work, item))
            if len(pending) < n:
                continue
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                on_row(fut.result())
        for fut in pending:
            on_row(fut.result())
    finally:
        stop.set()
        pool.shutdown(wait=False, cancel_futures=True)


def label_unit(pipe, cfg, unit, load, stage_ms) -> list:
    """The rows of `unit` [(position, sample_id)], in the unit's order, with up to cfg.concurrency samples in flight
    (on engine sides: their calls batched by the engines); no state outside its arguments."""
    rows = []
    label_rows(pipe, cfg, [tuple(x) for x in unit], load, stage_ms, rows.append)
    order = {int(p): i for i, (p, _) in enumerate(unit)}
    from .parts import ORDER_COLUMN

    return sorted(rows, key=lambda row: order.get(int(row[ORDER_COLUMN]), 0))


def label_todo(pipe, cfg, store, todo, load, stage_ms) -> float:
    """Label and store `todo`; returns the seconds it took."""
    t0 = time.monotonic()
    sink = RowSink(store, cfg.flush_every, len(todo), cfg.progress)
    try:
        label_rows(pipe, cfg, todo, load, stage_ms, lambda row: sink.add([row]))
    finally:
        sink.close()
    return time.monotonic() - t0
