"""The registry under concurrency and kills: concurrent train-router processes on one fresh sqlite store all
register and the champion is the one the rule picks; a killed run is repaired by the next run, which says so;
store failures exit 2 with one line."""
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from routedvlm.cli import main

ROUNDS = (10, 20, 30)  # same labels and split, different models: utilities comparable on the same test rows


@pytest.fixture(scope="module")
def small_labels(tmp_path_factory):
    from routedvlm.training.synthetic import write_synthetic_labels

    return write_synthetic_labels(tmp_path_factory.mktemp("labels") / "labels.parquet", 600, seed=1)


def _cmd(labels, uri, out, rounds):
    return [sys.executable, "-m", "routedvlm.cli", "train", "--data", str(labels), "--tracking-uri", uri,
            "--num-boost-round", str(rounds), "--output-dir", str(out)]


def _env():
    return {**os.environ, "OMP_NUM_THREADS": "1", "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}


@pytest.mark.slow
def test_concurrent_runs_on_a_fresh_store_all_register_and_the_rule_picks_the_champion(small_labels, tmp_path):
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path}/store/mlflow.db"
    procs = [subprocess.Popen(_cmd(small_labels, uri, tmp_path / f"out{r}", r), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=_env()) for r in ROUNDS]
    results = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0 and "Traceback" not in err, err[-3000:]
        assert re.search(r"registered vlm-router version \d \((not )?champion", out), out
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    versions = sorted(client.search_model_versions("name = 'vlm-router'"), key=lambda v: int(v.version))
    assert [str(v.version) for v in versions] == ["1", "2", "3"]
    utility = {str(v.version): float(v.tags["routedvlm.test_utility"]) for v in versions}
    assert all("routedvlm.champion_decision" in v.tags for v in versions)
    best = max(utility.values())
    expected = min((v for v, u in utility.items() if u == best), key=int)  # ties: the first to reach it keeps it
    assert str(client.get_model_version_by_alias("vlm-router", "champion").version) == expected


def _running_run(db: Path) -> str | None:
    if not db.is_file():
        return None
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as con:
            row = con.execute("select run_uuid from runs where status = 'RUNNING'").fetchone()
    except sqlite3.Error:
        return None
    return row[0] if row else None


@pytest.mark.slow
def test_a_run_killed_while_logging_is_repaired_by_the_next_run(small_labels, tmp_path, caplog):
    from mlflow import MlflowClient

    db = tmp_path / "store" / "mlflow.db"
    uri = f"sqlite:///{db}"
    proc = subprocess.Popen(_cmd(small_labels, uri, tmp_path / "killed", 10), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=_env())
    deadline, killed = time.monotonic() + 300, None
    while killed is None and proc.poll() is None and time.monotonic() < deadline:
        killed = _running_run(db)
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert killed, "the run never showed up as RUNNING"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    # what an older routedvlm, killed between creating a version and tagging it, left behind; and a version whose
    # run was killed before the champion comparison
    client.create_registered_model("vlm-router")
    client.create_model_version("vlm-router", source=str(tmp_path), run_id=None)
    client.create_model_version("vlm-router", source=str(tmp_path), run_id=None, tags={"routedvlm.labels_hash": "x"})
    with caplog.at_level("WARNING", logger="routedvlm.training"):
        assert main(["train", "--data", str(small_labels), "--tracking-uri", uri, "--num-boost-round", "10",
                     "--output-dir", str(tmp_path / "next")]) == 0
    err = caplog.text
    assert f"run {killed} was left RUNNING by a train-router that was killed: marked FAILED" in err
    assert "vlm-router version 1 has no routedvlm tags (an interrupted or external registration): tagged" in err
    assert client.get_run(killed).info.status == "FAILED"
    assert "vlm-router version 2: not compared with the champion: its train-router was interrupted" in err
    assert client.get_model_version("vlm-router", "1").tags["routedvlm.incomplete"]
    assert client.get_model_version("vlm-router", "2").tags["routedvlm.champion_decision"].startswith("not compared")
    assert str(client.get_model_version_by_alias("vlm-router", "champion").version) == "3"


def test_a_store_that_cannot_be_opened_exits_2_with_one_line(small_labels, tmp_path, capsys):
    db = tmp_path / "store" / "mlflow.db"
    db.parent.mkdir()
    db.write_bytes(b"this is not a sqlite database" * 100)
    rc = main(["train", "--data", str(small_labels), "--tracking-uri", f"sqlite:///{db}", "--num-boost-round", "5",
               "--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2
    line = next(ln for ln in err.splitlines() if ln.startswith("error: "))
    assert re.match(rf"^error: The MLflow store '{re.escape(str(db))}' cannot be opened \(\w+: .*file is not a database", line)
    err = re.sub(r"--- Logging error ---[\s\S]*?\nArguments: .*\n", "", err)  # handlers of earlier in-process runs
    assert "Traceback" not in err and "[SQL:" not in err
