"""`routedvlm label --ray`: the same per-sample labelling on a Ray cluster (`pip install routedvlm[ray]`).

An actor pool: each worker (one Ray actor, `--gpus-per-worker` GPUs) loads one pipeline once (local models on its
GPUs, in-process vLLM engines 'vllm:<folder>', or remote sides) and labels small work units of samples; the driver
hands a worker its next unit as soon as it returns one (a slow worker never holds the run) and stores every returned
unit as an atomic part in the usual parts folder, so `--resume` works across Ray and plain runs alike. Sides that
batch (engines, servers) get several units in flight per worker, up to `--concurrency` samples, so the engine's
batch stays full while units stay small: each unit's calls join the same running batch (runner.label_unit). A
worker that dies (its process, its node) is replaced and its units in flight go back to the queue: a kill loses at
most those. Ray is imported only here, only when `--ray` is given. Workers read the data set themselves: a local
path must exist on every node (hub ids always do); engine and Hub settings of the driver's environment (VLLM_*,
ROUTEDVLM_*, HF_*, OMP_NUM_THREADS) are passed to the workers. Why an actor pool and not Ray Data's LLM
processors: docs/DESIGN.md (Scale), measured by benchmarks/bench_engine_scaleout.py.
"""
from __future__ import annotations

import logging
import math
import os
import time
from collections import deque

from routedvlm.errors import ConfigError, LabelsError, SideUnavailableError

log = logging.getLogger(__name__)
MAX_REPLACEMENTS = 3  # per worker slot: a worker that dies more often than this ends the run
UNITS_PER_WORKER = 4  # at least this many units per worker, so that the fast ones take over the slow ones' work
FORWARDED_ENV = ("VLLM_", "ROUTEDVLM_", "HF_", "OMP_NUM_THREADS", "TOKENIZERS_PARALLELISM")


def import_ray():
    try:
        import ray
    except ImportError:
        raise ConfigError("--ray needs Ray: `pip install 'routedvlm[ray]'` (or `pip install -r requirements-ray.txt`), "
                          "or label without --ray.") from None
    return ray


class LabelWorker:
    """One Ray actor: a pipeline and the data set, built from the run's LabelConfig fields."""

    def __init__(self, cfg_fields: dict):
        from .config import LabelConfig
        from .models import load_pipeline, stage_cost
        from .sources import open_source

        self.cfg = LabelConfig(**cfg_fields)
        self.cfg.ray = False  # inside a worker the run is a plain one
        self.cfg.progress = False
        if self.cfg.device in ("auto", "cpu") and not _gpu_ids():
            _cpu_threads()
        self.pipe, self.device = load_pipeline(self.cfg)
        # every side of the ladder starts now (an engine side builds its engine once per worker, not inside the first
        # unit): a worker that cannot start its sides fails in its creation task, before it is handed any unit
        self.pipe.start()
        self.source, _, self.load = open_source(self.cfg)
        self.stage_ms, _ = stage_cost(self.cfg, "unused")

    def info(self) -> dict:
        import socket

        return {"pid": os.getpid(), "host": socket.gethostname(), "device": self.device, "gpus": _gpu_ids()}

    def metadata(self, cost_meta: dict, run_cfg_fields: dict) -> dict:
        from .config import LabelConfig
        from .metadata import build_metadata

        return build_metadata(LabelConfig(**run_cfg_fields), self.pipe, self.device, self.source, cost_meta)

    def label(self, unit: list) -> list:
        from .runner import label_unit

        return label_unit(self.pipe, self.cfg, unit, self.load, self.stage_ms)

    def close(self) -> None:
        """Close every side of the ladder this worker started (engine processes end with them)."""
        self.pipe.close()


def _worker_env() -> dict:
    return {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_ENV)}


def _gpu_ids() -> list:
    try:
        import ray

        return [str(g) for g in ray.get_gpu_ids()]
    except Exception:  # noqa: BLE001 - outside Ray, or no GPUs
        return []


def _cpu_threads() -> None:
    """On CPU, one torch thread per CPU Ray gave this worker (workers would otherwise oversubscribe the cores)."""
    import ray
    import torch

    cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", 1)
    torch.set_num_threads(max(1, int(cpus)))


class RayLabeller:
    """`with RayLabeller(cfg) as run:` starts (or joins) the cluster and the workers; `run.metadata(...)`,
    `run.label(store, todo)`; leaving the block stops the workers (and a local cluster this run started)."""

    def __init__(self, cfg):
        self.cfg, self.ray = cfg, import_ray()
        self._started_cluster, self.workers, self._replaced = False, [], {}

    def __enter__(self) -> "RayLabeller":
        ray = self.ray
        if not ray.is_initialized():
            kwargs = {"include_dashboard": False, "log_to_driver": False}
            if self.cfg.ray_address is None:
                kwargs["num_cpus"] = max(os.cpu_count() or 1, int(self.cfg.num_workers or 1))
            ray.init(address=self.cfg.ray_address, **kwargs)
            self._started_cluster = True
        n = self._num_workers()
        self.cfg.num_workers = n
        self.slots = units_in_flight(self.cfg)
        self._actor = ray.remote(num_cpus=1, num_gpus=float(self.cfg.gpus_per_worker), max_restarts=0,
                                 max_concurrency=self.slots + 1,  # + 1: close() while units run
                                 runtime_env={"env_vars": _worker_env()})(LabelWorker)
        self.workers = [self._start(i) for i in range(n)]
        for worker in list(self.workers):
            self._hello(worker)
        log.info("labelling on Ray with %d worker(s), %s GPU(s) each", n, self.cfg.gpus_per_worker)
        return self

    def __exit__(self, *exc) -> None:
        ray = self.ray
        closing = []
        for w in self.workers:
            try:
                closing.append(w["actor"].close.remote())
            except Exception:  # noqa: BLE001 - already dead
                pass
        try:
            ray.wait(closing, num_returns=len(closing), timeout=60)
        except Exception:  # noqa: BLE001 - a dead worker has nothing to close
            pass
        for w in self.workers:
            try:
                ray.kill(w["actor"])
            except Exception:  # noqa: BLE001 - already dead
                pass
        if self._started_cluster:
            self.ray.shutdown()

    def _num_workers(self) -> int:
        if self.cfg.num_workers:
            return int(self.cfg.num_workers)
        res = self.ray.cluster_resources()
        gpus = float(self.cfg.gpus_per_worker)
        n = int(res.get("GPU", 0) // gpus) if gpus else int(res.get("CPU", 1))
        if n < 1:
            raise ConfigError(f"The Ray cluster has {res.get('GPU', 0):g} GPU(s), fewer than --gpus-per-worker "
                              f"{gpus:g}; lower --gpus-per-worker or add GPUs.")
        return n

    def _fields(self) -> dict:
        from dataclasses import fields

        return {f.name: getattr(self.cfg, f.name) for f in fields(self.cfg)}

    def _start(self, slot: int) -> dict:
        actor = self._actor.remote(self._fields())
        return {"slot": slot, "actor": actor}

    def _hello(self, worker: dict) -> dict:
        """Wait until a worker has loaded its pipeline and log where it runs (a worker that cannot start is
        replaced; one whose models fail to load ends the run: every replacement would fail the same way)."""
        ray = self.ray
        while True:
            try:
                info = ray.get(worker["actor"].info.remote())
            except ray.exceptions.RayActorError as exc:
                if "creation task" in str(exc):
                    raise LabelsError(f"a Ray worker could not load the pipeline: {_short(exc)}") from None
                worker = self._replace(worker, _short(exc), hello=False)
                continue
            log.info("Ray worker %d: PID %s on %s (%s)", worker["slot"], info["pid"], info["host"], info["device"])
            return worker

    def _replace(self, worker: dict, why: str, *, hello: bool = True) -> dict:
        slot = worker["slot"]
        self._replaced[slot] = self._replaced.get(slot, 0) + 1
        if self._replaced[slot] > MAX_REPLACEMENTS:
            raise LabelsError(f"Ray worker {slot} died {self._replaced[slot]} times (last: {why}); the samples "
                              "stored so far are kept: fix the cause and rerun with --resume.")
        log.warning("Ray worker %d died (%s); starting a new one, its samples go back to the queue", slot, why)
        new = self._start(slot)
        self.workers[self.workers.index(worker)] = new
        return self._hello(new) if hello else new

    def metadata(self, source, cost_meta: dict) -> dict:
        """The run's labels metadata, built by a worker (the models are loaded there, not on the driver)."""
        ray, err = self.ray, None
        for _ in range(MAX_REPLACEMENTS + 1):
            worker = self.workers[0]
            try:
                return ray.get(worker["actor"].metadata.remote(cost_meta, self._fields()))
            except ray.exceptions.RayActorError as exc:
                err = exc
                self._replace(worker, _short(exc))
            except ray.exceptions.RayTaskError as exc:
                raise LabelsError(f"a Ray worker failed to describe the run: {_short(exc)}") from None
        raise LabelsError(f"no Ray worker could load the models: {_short(err)}")

    def label(self, store, todo) -> float:
        """Label `todo` on the workers, storing each returned unit as a part; returns the seconds it took."""
        from .runner import RowSink

        t0, ray = time.monotonic(), self.ray
        size = max(1, min(int(self.cfg.flush_every), math.ceil(len(todo) / (len(self.workers) * UNITS_PER_WORKER))))
        queue = deque([list(todo[i:i + size]) for i in range(0, len(todo), size)])
        running = {}  # ObjectRef -> (worker, unit)
        sink = RowSink(store, 1, len(todo), self.cfg.progress, desc="labelling (ray)")
        try:
            for w in list(self.workers):
                self._fill(w, queue, running)
            while running:
                ready, _ = ray.wait(list(running), num_returns=1)
                worker, unit = running.pop(ready[0])
                try:
                    rows = ray.get(ready[0])
                except ray.exceptions.RayActorError as exc:
                    if "creation task" in str(exc):  # a replacement that cannot load its models
                        raise LabelsError(f"a Ray worker could not load the pipeline: {_short(exc)}") from None
                    lost = [unit] + [running.pop(ref)[1] for ref in [r for r, (w, _) in running.items() if w is worker]]
                    queue.extendleft(reversed(lost))  # every unit the dead worker held, first in the queue
                    worker = self._replace(worker, _short(exc), hello=False)  # the others go on while it loads
                except ray.exceptions.RayTaskError as exc:
                    if isinstance(getattr(exc, "cause", None), SideUnavailableError):  # a server's outage: job.py stops
                        raise SideUnavailableError(str(exc.cause)) from None
                    raise LabelsError(f"a Ray worker failed: {_short(exc)}") from None
                else:
                    sink.add(rows, workers=len(self.workers))
                self._fill(worker, queue, running)
        finally:
            sink.close()
        return time.monotonic() - t0

    def _fill(self, worker: dict, queue: deque, running: dict) -> None:
        """Give `worker` units until it holds `self.slots` of them (or the queue is empty)."""
        held = sum(1 for w, _ in running.values() if w is worker)
        while queue and held < self.slots:
            unit = queue.popleft()
            running[worker["actor"].label.remote(unit)] = (worker, unit)
            held += 1


def units_in_flight(cfg) -> int:
    """Units a worker holds at once: 1 when a side serves one sample at a time (a local model), else enough units of
    `flush_every` samples to keep `--concurrency` samples in flight on its engines or servers."""
    from .config import every_side

    if not every_side(cfg, "batching"):
        return 1
    return max(1, math.ceil(int(cfg.concurrency) / int(cfg.flush_every)))


def _short(exc) -> str:
    text = str(exc).strip().splitlines()
    return text[-1][:300] if text else type(exc).__name__
