"""The audit log on disk: parts with checksums, one writer at a time, nothing acknowledged is lost on kill -9, a
damaged part is set aside; `routedvlm audit report` (history + PNG) and `audit export` (a data set to relabel)."""
import logging
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from routedvlm.data.audit import AuditLog, read_log
from routedvlm.errors import ConfigError, LabelsError, OutputLockedError


def audit(i, agree=True, **extra):
    rec = {"kind": "audit", "request_id": f"req-{i}", "time": 1000.0 + i, "router": "r", "router_type": "lightgbm",
           "reference": "large_reason", "alpha": 0.1, "delta": 0.05, "window": 0, "routed_strategy": "large_direct",
           "keep_tokens": None, "routed_answer": "4", "reference_answer": "4" if agree else "5", "agree": agree,
           "status": "unproven", "features": "{}", "question": "2 bars?", "image": b"\x89PNG fake", "gold": None,
           "routed_correct": None, "reference_correct": None}
    return rec | extra


def feedback(i, gold, routed_correct, reference_correct):
    return {"kind": "feedback", "request_id": f"req-{i}", "time": 2000.0 + i, "router": "r", "gold": gold,
            "routed_correct": routed_correct, "reference_correct": reference_correct, "status": "unproven"}


def test_records_are_checksummed_parts_read_back_in_order(tmp_path):
    path = tmp_path / "audit.parquet"
    with AuditLog(path, rows_per_part=1) as log:
        for i in range(5):
            log(audit(i, agree=i != 2))
    parts = sorted((tmp_path / "audit.parquet.parts").glob("part-*.parquet"))
    assert len(parts) == 5 and all(len(p.stem.split("-")[-1]) == 64 for p in parts)
    df = read_log(path)
    assert list(df["request_id"]) == [f"req-{i}" for i in range(5)] and list(df["agree"]) == [True, True, False, True, True]
    assert df["question"].isna().all() and df["image"].isna().all()  # inputs only with store_inputs
    with AuditLog(path, store_inputs=True) as log:  # a restarted server appends
        log(audit(5))
    df = read_log(path)
    assert list(df["seq"]) == list(range(6)) and df["question"].iloc[-1] == "2 bars?"


def test_a_second_writer_is_refused_while_the_first_is_alive(tmp_path):
    with AuditLog(tmp_path / "audit.parquet"):
        with pytest.raises(OutputLockedError, match="the audit log .* is being written by another"):
            AuditLog(tmp_path / "audit.parquet")


@pytest.mark.slow
def test_nothing_acknowledged_is_lost_on_kill(tmp_path):
    path = tmp_path / "audit.parquet"
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_audit_log import audit
        from routedvlm.data.audit import AuditLog
        log = AuditLog({str(path)!r}, store_inputs=True, rows_per_part=1)
        i = 0
        while True:
            log(audit(i))
            print(i, flush=True)
            i += 1
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    acked = [int(proc.stdout.readline()) for _ in range(25)]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    df = read_log(path)
    assert set(f"req-{i}" for i in acked) <= set(df["request_id"])  # every acknowledged record survived
    with AuditLog(path) as log:  # the next writer takes over the dead one's lock and appends
        log(audit(10_000))
    assert read_log(path)["request_id"].iloc[-1] == "req-10000"
    assert not list((tmp_path / "audit.parquet.parts").glob(".*.tmp"))


def test_a_damaged_part_is_set_aside_with_a_warning(tmp_path, caplog):
    path = tmp_path / "audit.parquet"
    with AuditLog(path, rows_per_part=1) as log:
        for i in range(3):
            log(audit(i))
    victim = sorted((tmp_path / "audit.parquet.parts").glob("part-*.parquet"))[1]
    victim.write_bytes(victim.read_bytes()[:-10] + b"0123456789")
    with caplog.at_level(logging.WARNING):
        df = read_log(path)
    assert list(df["request_id"]) == ["req-0", "req-2"] and "damaged" in caplog.text


def test_report_prints_the_history_and_draws_the_bound(tmp_path, capsys):
    from routedvlm.cli import main

    path = tmp_path / "audit.parquet"
    rng = np.random.default_rng(0)
    with AuditLog(path) as log:
        for i in range(400):
            log(audit(i, agree=bool(rng.random() > 0.03)))
    png = tmp_path / "audit.png"
    assert main(["audit", "report", str(path), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "alpha = 0.1000" in out and "unproven" in out and "holding" in out and "now: holding after 400 audits" in out
    assert png.read_bytes().startswith(b"\x89PNG")


def test_report_counts_gold_feedback_as_regret(tmp_path):
    from routedvlm.data.audit.report import replay
    from routedvlm.data.audit.log import read_log as read

    path = tmp_path / "audit.parquet"
    with AuditLog(path) as log:
        for i in range(200):
            log(audit(i, agree=False))  # every answer differs from the reference's ...
            log(feedback(i, "4", True, False))  # ... but the routed one is right: no regret
    mon, hist = replay(read(path))
    assert mon.status == "holding" and hist["status"].iloc[-1] == "holding"


def test_export_keeps_audits_with_inputs_and_gold(tmp_path, capsys):
    import pandas as pd

    from routedvlm.cli import main

    path = tmp_path / "audit.parquet"
    with AuditLog(path, store_inputs=True) as log:
        log(audit(0))
        log(audit(1))
        log(audit(2, question=None, image=None))
        log(feedback(0, "4", True, True))
        log(feedback(2, "4", True, True))
    out = tmp_path / "audited.parquet"
    assert main(["audit", "export", str(path), "--out", str(out)]) == 0
    assert "wrote 1 audited samples" in capsys.readouterr().out
    df = pd.read_parquet(out)
    assert list(df.columns) == ["sample_id", "image", "question", "answer"] and df["sample_id"].tolist() == ["req-0"]
    with AuditLog(tmp_path / "bare.parquet") as log:
        log(audit(0))
    with pytest.raises(LabelsError, match="Nothing to export"):
        from routedvlm.data.audit.export import export

        export(tmp_path / "bare.parquet", tmp_path / "x.parquet")


def test_records_are_written_in_batches_and_a_restart_reads_only_the_newest_part(tmp_path, monkeypatch):
    """Issue 39: one file per record (531 files for 285 audits), all re-read on every restart."""
    import pandas as pd

    path = tmp_path / "audit.parquet"
    with AuditLog(path, rows_per_part=100) as log:
        for i in range(285):
            log(audit(i))
    parts = sorted((tmp_path / "audit.parquet.parts").glob("part-*.parquet"))
    assert len(parts) == 3  # 100 + 100 + 85 (the last flushed on close)
    opened = []
    real = pd.read_parquet
    monkeypatch.setattr(pd, "read_parquet", lambda p, *a, **k: opened.append(str(p)) or real(p, *a, **k))
    with AuditLog(path) as log:  # a restart: the next sequence number from the newest part alone
        log(audit(285))
    monkeypatch.undo()
    assert opened == [str(parts[-1])]
    df = read_log(path)
    assert list(df["seq"]) == list(range(286))


def test_a_quiet_server_flushes_after_flush_seconds(tmp_path):
    import time

    path = tmp_path / "audit.parquet"
    log = AuditLog(path, rows_per_part=1000, flush_seconds=0.2)
    try:
        log(audit(0))
        for _ in range(600):  # bounded: the timer writes the part
            if list((tmp_path / "audit.parquet.parts").glob("part-*.parquet")):
                break
            time.sleep(0.05)
        assert list(read_log(path)["request_id"]) == ["req-0"]
    finally:
        log.close()


def test_replicas_write_their_own_parts_and_the_report_merges_them(tmp_path, capsys):
    from routedvlm.cli import main

    path = tmp_path / "audit.parquet"
    a, b = AuditLog(path, replica="pod-a"), AuditLog(path, replica="pod-b")  # both alive at once: no lock conflict
    try:
        for i in range(300):
            (a if i % 2 else b)(audit(i))
        a(feedback(1, "4", True, True))
    finally:
        a.close(), b.close()
    assert (tmp_path / "audit.parquet.replica-pod-a.parts").is_dir() and (tmp_path / "audit.parquet.replica-pod-b.parts").is_dir()
    df = read_log(path)
    assert len(df) == 301 and set(df["replica"]) == {"pod-a", "pod-b"}
    assert list(df[df["kind"] == "audit"]["request_id"]) == [f"req-{i}" for i in range(300)]  # merged by time
    assert main(["audit", "report", str(path)]) == 0
    assert "now: holding after 300 audits" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="replica"):
        AuditLog(path, replica="../escape")


def test_the_status_history_is_bounded():
    from routedvlm.inference.audit.monitor import HISTORY_ROWS, AuditMonitor

    mon = AuditMonitor(alpha=0.1, reference="large_reason")
    for i in range(HISTORY_ROWS + 500):
        mon.record(f"req-{i}", True)
    assert len(mon.history) == HISTORY_ROWS and mon.history[-1]["audits"] == HISTORY_ROWS + 500
