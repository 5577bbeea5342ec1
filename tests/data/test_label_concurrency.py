"""`routedvlm label --concurrency N`: the thread pool, answers equal to a serial run, resume at any concurrency,
and what `latency_ms__` means when several samples are in flight."""
import threading
import time
from types import SimpleNamespace

import pytest
from label_world import kill, label, label_args, make_world, same_labels, start_label_process, wait_for_parts

from routedvlm.errors import ConfigError

N = 6


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("concurrency"), N, broken=(1,))


@pytest.fixture(scope="module")
def serial(world):
    from routedvlm.data.labels.schema import read_labels

    out = world.root / "serial" / "labels.parquet"
    assert label(*label_args(world, out)) == 0
    return read_labels(out)


def _cfg(**kw):
    from routedvlm.data.labelling.config import LabelConfig

    return LabelConfig(**{"small": "s", "large": "l", "dataset": "d", "out": "o.parquet", **kw})


def test_label_rows_keeps_n_in_flight_and_delivers_every_row_once(monkeypatch):
    """With server sides (no local model lock) up to N samples run at once; every row arrives once, in this thread."""
    from routedvlm.data.labelling import per_sample as labelling, runner as label_runner

    state = {"now": 0, "peak": 0}
    lock, full = threading.Lock(), threading.Event()

    def fake_process(pipe, cfg, position, sample_id, load, name, stage_ms):
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
            if state["now"] >= 8:
                full.set()
        full.wait(timeout=10)  # hold the first samples until 8 overlap (deterministic on a loaded machine)
        time.sleep(0.01 * (position % 3))
        with lock:
            state["now"] -= 1
        return {"sample_id": sample_id, "error": None}

    monkeypatch.setattr(labelling, "process", fake_process)
    remote = SimpleNamespace(stateful=False)  # a side that keeps no per-call state (a server): samples overlap
    pipe = SimpleNamespace(sides={"small": remote, "large": remote})
    todo = [(i, f"s{i}") for i in range(40)]
    rows, main = [], threading.current_thread()

    def on_row(row):
        assert threading.current_thread() is main
        rows.append(row["sample_id"])

    load = SimpleNamespace(dataset_name="d")
    label_runner.label_rows(pipe, _cfg(concurrency=8), todo, load, None, on_row)
    assert sorted(rows) == sorted(s for _, s in todo) and state["peak"] == 8
    state["peak"] = 0
    full.clear()
    label_runner.label_rows(SimpleNamespace(sides={"small": remote, "large": SimpleNamespace(stateful=True)}), _cfg(concurrency=8), todo, load,
                            None, lambda row: None)
    assert state["peak"] == 8  # process itself runs in parallel; only run_many is serialised for local models


def test_local_models_run_one_sample_at_a_time():
    from routedvlm.data.labelling.runner import _Serialised

    state = {"now": 0, "peak": 0}

    class Pipe:
        def run_many(self, *a):
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
            time.sleep(0.005)
            state["now"] -= 1

    view = _Serialised(Pipe())
    threads = [threading.Thread(target=view.run_many) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert state["peak"] == 1


@pytest.mark.slow
def test_concurrency_gives_the_serial_answers_correctness_and_features(world, serial):
    from routedvlm.data.labels.schema import read_labels

    out = world.root / "c4" / "labels.parquet"
    assert label(*label_args(world, out, "--concurrency", "4", "--flush-every", "2")) == 0
    df, meta = read_labels(out)
    same_labels(df, serial[0])
    assert meta["concurrency"] == 4 and meta["runner"] == "threads"
    assert meta["latency_source"] == "wall-clock" and meta["requests_in_flight"] == 1  # local: one at a time
    assert serial[1]["runner"] == "serial" and serial[1]["concurrency"] == 1


@pytest.mark.slow
def test_resume_at_another_concurrency_redoes_duplicates_and_loses_nothing(world, serial, capsys):
    from routedvlm.data.labelling.parts import PartStore
    from routedvlm.data.labels.schema import read_labels

    out = world.root / "killed" / "labels.parquet"
    proc = start_label_process(world, out, "--concurrency", "3", "--flush-every", "1")
    store = PartStore(out)
    try:
        wait_for_parts(store, proc)
    finally:
        kill(proc)
    stored = store.done_ids()
    assert 1 <= len(stored) < N, "the subprocess must die mid-run"
    assert label(*label_args(world, out, "--resume", "--concurrency", "2")) == 0
    assert f"({N - len(stored)} labelled in this run" in capsys.readouterr().out
    df, _ = read_labels(out)
    assert sorted(df["sample_id"]) == world.ids
    same_labels(df, serial[0])


def test_latency_source_says_what_latencies_mean():
    from routedvlm.data.labelling.runner import latency_source

    local, remote = _cfg(concurrency=8), _cfg(small="http://h:1/v1#s", large="http://h:2/v1#l")
    assert remote.concurrency == 32 and _cfg().concurrency == 1  # defaults: servers 32, local models 1
    assert latency_source(local, remote=False) == "wall-clock"
    assert latency_source(remote, remote=True) == "batched-wall-clock"
    assert latency_source(_cfg(small=remote.small, large=remote.large, concurrency=1), remote=True) == "wall-clock"
    assert latency_source(_cfg(small=remote.small, large=remote.large, cost="p.json"), remote=True) == "cost-model"
    ray = _cfg(small=remote.small, large=remote.large, concurrency=1, ray=True)
    assert latency_source(ray, remote=True) == "batched-wall-clock"  # workers not counted: several


def test_resume_never_mixes_two_latency_meanings():
    from routedvlm.data.labelling.job import check_latency_source

    with pytest.raises(ConfigError, match=r"^--resume: the samples stored in x have latency_source 'wall-clock', "
                                          r"this run would record 'batched-wall-clock'"):
        check_latency_source({"latency_source": "wall-clock"}, {"latency_source": "batched-wall-clock"}, "x")


def test_scale_flags_are_validated():
    with pytest.raises(ConfigError, match=r"^The `concurrency` setting must be a positive integer. Got 0 instead"):
        _cfg(concurrency=0)
    with pytest.raises(ConfigError, match=r"^The `ray` setting is off but --num-workers, --gpus-per-worker was given"):
        _cfg(num_workers=2, gpus_per_worker=1)
