"""Running a sample's independent calls at once: `parallel` on one process-wide pool of reused threads (`shared_pool`).

No dependencies inside routedvlm: the pipeline, its overlapped labelling run and the HTTP side's transfers all use it.
"""
from __future__ import annotations

import sys
import threading
from concurrent.futures import ThreadPoolExecutor, wait

_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def shared_pool() -> ThreadPoolExecutor:
    """The process's pool for `parallel`: an idle thread takes the next job and a new thread starts only when none is
    idle, with no practical cap (a job may itself call `parallel` and wait), so the many calls of many samples in
    flight cost no thread start each (a labeller with 128 samples in flight made ~9 thread starts per sample)."""
    global _POOL
    if _POOL is None:
        with _POOL_LOCK:
            if _POOL is None:
                _POOL = ThreadPoolExecutor(max_workers=sys.maxsize >> 32, thread_name_prefix="routedvlm-call")
    return _POOL


def parallel(jobs: dict, concurrent: bool) -> dict:
    """Run named zero-argument callables; at once when `concurrent` (models on different devices, or sides that batch
    concurrent calls): the last one in this thread, the others in `shared_pool()`. Returns when every job has ended;
    a failure raises the first failing job's error (in the jobs' order)."""
    if not concurrent or len(jobs) < 2:
        return {name: fn() for name, fn in jobs.items()}
    names = list(jobs)
    pool = shared_pool()
    futures = {name: pool.submit(jobs[name]) for name in names[:-1]}
    try:
        last, failed = jobs[names[-1]](), None
    except BaseException as exc:  # noqa: BLE001 - raised below, after the other jobs, in the jobs' order
        last, failed = None, exc
    wait(futures.values())
    out = {name: fut.result() for name, fut in futures.items()}
    if failed is not None:
        raise failed
    out[names[-1]] = last
    return {name: out[name] for name in names}
