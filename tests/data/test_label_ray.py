"""`routedvlm label --ray` on a local Ray cluster (two workers, the tiny pair): labels equal to a serial run, a dead
worker's samples redone, and --resume across Ray and plain runs."""
import errno
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest
from label_world import (kill, label, label_args, ladder_args, make_world, same_labels, start_label_process,
                         wait_for_parts)

from routedvlm.errors import ConfigError, StorageError

N = 8


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("ray"), N)


@pytest.fixture(scope="module")
def serial(world):
    from routedvlm.data.labels.schema import read_labels

    out = world.root / "serial" / "labels.parquet"
    assert label(*label_args(world, out)) == 0
    return read_labels(out)[0]


@pytest.fixture(scope="module")
def cluster():
    """One local Ray cluster for the module (the runner joins an initialised Ray instead of starting its own)."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _read(out):
    from routedvlm.data.labels.schema import read_labels

    return read_labels(out)


@pytest.mark.slow
def test_two_workers_label_like_a_serial_run_and_a_dead_workers_samples_are_redone(world, serial, cluster, caplog):
    from routedvlm.data.labelling.parts import PartStore

    out = world.root / "two" / "labels.parquet"
    result = {}
    run = threading.Thread(target=lambda: result.update(rc=label(*label_args(world, out, "--ray", "--num-workers", "2"))))
    with caplog.at_level(logging.INFO, logger="routedvlm"):
        run.start()
        pid, deadline = None, time.monotonic() + 300
        while run.is_alive() and time.monotonic() < deadline and not (pid and PartStore(out).part_files()):
            found = [re.search(r"Ray worker 0: PID (\d+)", r.getMessage()) for r in caplog.records]
            pid = next((int(m.group(1)) for m in found if m), None)
            time.sleep(0.05)
        assert pid and run.is_alive(), "worker 0 must be up and the run still going"
        os.kill(pid, signal.SIGKILL)  # a worker dies mid-run (as a node would)
        run.join(timeout=600)
    assert result["rc"] == 0
    assert any("Ray worker 0 died" in r.getMessage() for r in caplog.records)
    df, meta = _read(out)
    assert sorted(df["sample_id"]) == world.ids  # none lost, none duplicated
    same_labels(df, serial)
    assert meta["runner"] == "ray" and meta["ray"]["num_workers"] == 2 and meta["latency_source"] == "wall-clock"


@pytest.mark.slow
def test_a_ladder_labels_on_ray_like_a_serial_run(world, cluster, tmp_path):
    """Each worker loads the whole ladder (small, small as mid, large); the labels equal a plain run's."""
    plain, on_ray = tmp_path / "plain.parquet", tmp_path / "ray.parquet"
    assert label(*ladder_args(world, plain, "--limit", "4")) == 0
    assert label(*ladder_args(world, on_ray, "--limit", "4", "--ray", "--num-workers", "2")) == 0
    df, meta = _read(on_ray)
    same_labels(df, _read(plain)[0])
    assert meta["ladder"] == ["small", "mid", "large"] and meta["schema_version"] == 2 and meta["runner"] == "ray"


@pytest.mark.slow
def test_a_plain_run_resumes_on_ray_and_a_ray_run_resumes_plain(world, serial, cluster, monkeypatch, capsys):
    """plain (killed) -> Ray --resume (ends on a full disk after two parts) -> plain --resume: one sample set."""
    from routedvlm.data.labelling.parts import PartStore

    out = world.root / "plain-ray" / "labels.parquet"
    store = PartStore(out)
    proc = start_label_process(world, out, "--flush-every", "1")
    try:
        wait_for_parts(store, proc)
    finally:
        kill(proc)
    plain = len(store.done_ids())
    assert 1 <= plain < N
    real, count = os.open, {"n": 0}

    def full_after_two_parts(path, flags, *args, **kwargs):  # the lock, two parts; then the disk is full
        if str(path).startswith(str(out.parent)) and flags & os.O_CREAT:
            count["n"] += 1
            if count["n"] > 3:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", full_after_two_parts)
    with pytest.raises(StorageError, match=r"^Cannot write .*No space left on device"):
        label(*label_args(world, out, "--resume", "--ray", "--num-workers", "2"))
    monkeypatch.undo()
    both = len(PartStore(out).done_ids())
    assert plain < both < N
    assert label(*label_args(world, out, "--resume")) == 0
    assert f"({N - both} labelled in this run" in capsys.readouterr().out
    same_labels(_read(out)[0], serial)


def test_without_ray_installed_the_flag_says_how_to_get_it(monkeypatch):
    from routedvlm.data.labelling.ray_pool import import_ray

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ConfigError, match=r"^--ray needs Ray: `pip install 'routedvlm\[ray\]'`"):
        import_ray()


def test_label_help_imports_neither_torch_nor_ray():
    code = ("import sys\nfrom routedvlm.cli import main\ntry:\n    main(['label', '--help'])\n"
            "except SystemExit:\n    pass\nprint('torch' in sys.modules, 'ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "--ray-address" in out.stdout and out.stdout.strip().endswith("False False")


def test_workers_hold_one_unit_on_local_models_and_enough_units_for_concurrency_on_batching_sides(monkeypatch):
    """Local models serve one sample at a time: one unit per worker (a kill loses at most it); engines and servers
    batch: units of --flush-every samples until --concurrency samples are in flight per worker."""
    import types

    from routedvlm.data.labelling.config import LabelConfig

    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))  # 'vllm:' specs are accepted where vLLM is
    from routedvlm.data.labelling.ray_pool import units_in_flight

    common = dict(dataset="d.parquet", out="o.parquet", ray=True)
    assert units_in_flight(LabelConfig(small="s", large="l", **common)) == 1
    engines = LabelConfig(small="vllm:s", large="vllm:l", flush_every=8, **common)
    assert engines.concurrency == 32 and units_in_flight(engines) == 4
    servers = LabelConfig(small="http://h:1/v1#s", large="http://h:2/v1#l", concurrency=10, flush_every=4, **common)
    assert units_in_flight(servers) == 3


def _engine_like_side(events):
    """A class of engine-like fake sides (not stateful, batching) that record their lifecycle as files in `events`
    (`<worker pid>-<alias>-start` / `-close`); their stage methods are never called here."""
    from routedvlm.inference.sides.base import ModelSide

    def start(self):
        (events / f"{os.getpid()}-{self.name}-start").touch()

    def close(self):
        (events / f"{os.getpid()}-{self.name}-close").touch()

    def init(self, alias):
        self.name, self.reasoner, self.style, self.reason_prompt = alias, None, "hybrid", True

    stubs = {name: (lambda self, *a, **k: None) for name in ModelSide.__abstractmethods__}
    return type("EngineLike", (ModelSide,), {**stubs, "__init__": init, "start": start, "close": close,
                                             "kind": "vllm", "stateful": False})


@pytest.mark.slow
def test_every_side_of_a_three_engine_ladder_is_started_and_closed_by_each_ray_worker(world, cluster, tmp_path,
                                                                                      monkeypatch):
    """Regression: Ray workers started and closed only `[pipe.small, pipe.large]`, so on a three-engine ladder the
    mid engine was neither built up front nor shut down. Each worker now starts every side of `pipe.sides` when it is
    created and closes every one when the run ends."""
    from routedvlm.data.labelling import ray_pool
    from routedvlm.data.labelling.config import LabelConfig

    events = tmp_path / "events"
    events.mkdir()
    side_class = _engine_like_side(events)

    class LadderWorker(ray_pool.LabelWorker):  # shipped to the workers by value (a local class)
        def __init__(self, cfg_fields):
            from routedvlm.data.labelling import models
            from routedvlm.inference import CollaborativePipeline

            models.load_pipeline = lambda cfg: (CollaborativePipeline(sides=[side_class(a) for a in cfg.aliases]),
                                                    "cpu")
            super().__init__(cfg_fields)

    monkeypatch.setattr(ray_pool, "LabelWorker", LadderWorker)
    cfg = LabelConfig(models=(world.small, world.small, world.large), dataset=world.data,
                      out=str(tmp_path / "labels.parquet"), ray=True, num_workers=2, device="cpu", progress=False)
    with ray_pool.RayLabeller(cfg) as run:
        assert len(run.workers) == 2
        started = sorted(p.name for p in events.iterdir())
    done = sorted(p.name for p in events.iterdir())
    pids = sorted({name.split("-")[0] for name in done})
    assert len(pids) == 2 and pids[0] != str(os.getpid())
    assert started == sorted(f"{pid}-{alias}-start" for pid in pids for alias in ("small", "mid", "large"))
    assert done == sorted(f"{pid}-{alias}-{what}" for pid in pids for alias in ("small", "mid", "large")
                          for what in ("start", "close"))
