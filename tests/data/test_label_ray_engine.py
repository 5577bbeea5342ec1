"""`routedvlm label --ray` on in-process vLLM engine sides (`vllm:<folder>`; marked `vllm_engine`: runs in .venv-vllm,
`make test-vllm-engine`) on a local two-CPU Ray cluster: each worker loads its own engines once and labels whole units
with the batched labeller; the labels equal a plain engine run's; a worker killed mid-run loses only its units
(redone by its replacement), its engine processes die with it; a run killed outright is finished by `--resume`."""
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

pytestmark = pytest.mark.vllm_engine
N = 12
K_GRID = "4,8,16"
for _name, _value in (("VLLM_TARGET_DEVICE", "cpu"), ("VLLM_CPU_KVCACHE_SPACE", "1"),
                      ("VLLM_CPU_OMP_THREADS_BIND", "nobind"), ("VLLM_NO_USAGE_STATS", "1"), ("OMP_NUM_THREADS", "1")):
    os.environ.setdefault(_name, _value)


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory):
    from routedvlm.data.toyworld.make_labels import write_split

    return write_split("eval", N, 23, tmp_path_factory.mktemp("toy-ray-engine"))


def _argv(data, out, small, large, *extra) -> list:
    from routedvlm.data.toyworld.make_labels import MAX_DIRECT_TOKENS, MAX_REASON_TOKENS

    return ["--small", small, "--large", large, "--dataset", str(data), "--adapter", "toyworld", "--out", str(out),
            "--k-grid", K_GRID, "--max-new-tokens", str(MAX_DIRECT_TOKENS), "--max-reason-tokens",
            str(MAX_REASON_TOKENS), "--device", "cpu", "--no-progress", *extra]


def _engine_argv(data, out, *extra) -> list:
    from routedvlm.data.toyworld.make_labels import checkpoint_pair

    small, large = (f"vllm:{p}" for p in checkpoint_pair())
    return _argv(data, out, small, large, "--flush-every", "2", *extra)


def _label(argv) -> int:
    from routedvlm.data.labelling.cli import main

    return main(list(argv))


@pytest.fixture(scope="module")
def serial(toy_data, tmp_path_factory):
    """A plain (no Ray) labelling run on engine sides in this process: what every Ray run must reproduce (the engine
    labeller equals the serial local one: tests/inference/test_vllm_engine.py)."""
    from routedvlm.data.labelling.cli import _parser, config_from_args
    from routedvlm.data.labelling.job import run_labelling
    from routedvlm.data.labelling.models import load_pipeline
    from routedvlm.data.labels.schema import read_labels

    out = tmp_path_factory.mktemp("plain") / "labels.parquet"
    cfg = config_from_args(_parser().parse_args(_engine_argv(toy_data, out)), pytest.fail)
    pipe, _ = load_pipeline(cfg)
    try:
        run_labelling(cfg, pipe=pipe)
    finally:
        pipe.close()
    return read_labels(out)[0]


@pytest.fixture(scope="module")
def cluster():
    """A local two-CPU Ray cluster for the module (the labeller joins an initialised Ray instead of starting one)."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _same_as_plain(df, serial) -> None:
    assert sorted(df["sample_id"]) == sorted(serial["sample_id"]) and len(df) == N  # none lost, none duplicated
    assert df["error"].isna().all(), df["error"].dropna().tolist()
    got, want = df.set_index("sample_id").sort_index(), serial.set_index("sample_id").sort_index()
    compared = [c for c in want.columns if c.startswith(("answer__", "correct__", "output_tokens__"))]
    assert len(compared) > 20
    for col in compared:
        assert got[col].tolist() == want[col].tolist(), col


def _children(pid: int) -> list:
    import psutil

    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _gone(pids, timeout: float = 60) -> list:
    """The PIDs of `pids` still alive after `timeout` seconds."""
    import psutil

    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.5)
    return alive


def test_two_engine_workers_label_like_the_serial_labeller_and_a_killed_worker_loses_only_its_units(
        toy_data, serial, cluster, tmp_path, caplog):
    from routedvlm.data.labelling.parts import PartStore
    from routedvlm.data.labels.schema import read_labels

    out, result = tmp_path / "ray" / "labels.parquet", {}
    run = threading.Thread(target=lambda: result.update(rc=_label(_engine_argv(toy_data, out, "--ray",
                                                                                "--num-workers", "2"))))
    with caplog.at_level(logging.INFO, logger="routedvlm"):
        run.start()
        pid, deadline = None, time.monotonic() + 900
        while run.is_alive() and time.monotonic() < deadline and not (pid and PartStore(out).part_files()):
            found = [re.search(r"Ray worker 0: PID (\d+)", r.getMessage()) for r in caplog.records]
            pid = next((int(m.group(1)) for m in found if m), None)
            time.sleep(0.05)
        assert pid and run.is_alive(), "worker 0 must be up, a part stored, and the run still going"
        engine_pids = _children(pid)
        os.kill(pid, signal.SIGKILL)  # a worker dies mid-run (as its node would), holding its units
        run.join(timeout=1200)
    assert result["rc"] == 0
    assert any("Ray worker 0 died" in r.getMessage() for r in caplog.records)
    assert _gone(engine_pids) == [], "the killed worker's engine processes must not outlive it"
    df, meta = read_labels(out)
    _same_as_plain(df, serial)
    assert meta["runner"] == "ray" and meta["ray"]["num_workers"] == 2
    assert meta["models"]["large"]["engine"] == "vllm" and meta["latency_source"] == "batched-wall-clock"


def test_a_killed_ray_run_on_engine_sides_is_finished_by_resume(toy_data, serial, cluster, tmp_path):
    from routedvlm.data.labelling.parts import PartStore
    from routedvlm.data.labels.schema import read_labels

    out = tmp_path / "killed" / "labels.parquet"
    address = cluster.get_runtime_context().gcs_address  # the killed driver's actors run on the module's cluster
    cmd = [sys.executable, "-m", "routedvlm.cli", "label",
           *_engine_argv(toy_data, out, "--ray", "--ray-address", address, "--num-workers", "1", "--concurrency", "2")]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(os.environ))
    store, deadline = PartStore(out), time.monotonic() + 900
    try:
        while not store.part_files() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=120)
    done = len(store.done_ids())
    assert 1 <= done < N, proc.stderr.read().decode()[-2000:]
    assert _label(_engine_argv(toy_data, out, "--ray", "--num-workers", "1", "--concurrency", "2", "--resume")) == 0
    df, _ = read_labels(out)
    _same_as_plain(df, serial)
