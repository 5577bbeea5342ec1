"""Runs that collide on one output, damaged parts, stray temp files and storage failures: nothing is lost."""
import errno
import logging
import os
import signal

import pytest
from label_world import kill, label, label_args, label_cli, make_world, start_label_process, wait_for_parts

from routedvlm.errors import LabelsError, OutputLockedError

N = 6


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("collisions"), N)


def _ids(out):
    from routedvlm.data.labels.schema import read_labels

    return sorted(read_labels(out)[0]["sample_id"])


@pytest.mark.slow
def test_a_second_run_refuses_while_the_first_lives_and_takes_over_when_it_is_dead(world, capsys):
    from routedvlm.data.labelling.parts import PartStore

    out = world.root / "collide" / "labels.parquet"
    first = start_label_process(world, out, "--flush-every", "1")
    store = PartStore(out)
    try:
        wait_for_parts(store, first)
        assert first.poll() is None, "the first run must still be labelling"
        with pytest.raises(OutputLockedError, match=rf"^{out} is being written by another labelling run \(PID "
                                                    rf"{first.pid} on host .*\); wait for it to finish or stop it"):
            label(*label_args(world, out, "--resume"))
        assert label_cli(*label_args(world, out)) == 2  # a fresh run refuses too (work is there)
    finally:
        kill(first, signal.SIGKILL)
    stored = store.done_ids()
    assert 1 <= len(stored) < N
    assert label(*label_args(world, out, "--resume")) == 0  # the owner is dead: this run takes over
    assert f"({N - len(stored)} labelled in this run" in capsys.readouterr().out
    assert _ids(out) == world.ids and not store.dir.exists()


@pytest.mark.slow
def test_two_runs_started_together_lose_no_sample(world):
    """The issue's failure: a second run with --resume while the first still ran left 6 of 40 samples."""
    from routedvlm.data.labelling.parts import PartStore

    out = world.root / "together" / "labels.parquet"
    first = start_label_process(world, out, "--flush-every", "1")
    wait_for_parts(PartStore(out), first)
    second = start_label_process(world, out, "--flush-every", "1", "--resume")
    rc, err = second.wait(timeout=300), second.stderr.read()
    assert (rc == 2 and b"is being written by another labelling run" in err) or rc == 0  # 0: it found it complete
    assert first.wait(timeout=300) == 0
    assert _ids(out) == world.ids


@pytest.mark.slow
def test_a_damaged_part_is_redone_with_a_warning(world, monkeypatch, caplog, capsys):
    from routedvlm.data.labels import schema as labels_mod
    from routedvlm.data.labelling.parts import PartStore
    from routedvlm.errors import StorageError

    out = world.root / "damaged" / "labels.parquet"
    real = labels_mod.atomic_write

    def full_disk(path, write):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(labels_mod, "atomic_write", full_disk)  # the final write fails: every part stays
    with pytest.raises(StorageError, match=rf"^Cannot write '{out}': No space left on device \(the disk is full"):
        label(*label_args(world, out, "--flush-every", "2"))
    monkeypatch.setattr(labels_mod, "atomic_write", real)
    store = PartStore(out)
    parts = store.part_files()
    assert len(parts) == 3 and not out.exists()
    data = bytearray(parts[1].read_bytes())
    data[len(data) // 2] ^= 0xFF
    parts[1].write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="routedvlm"):
        assert label(*label_args(world, out, "--resume")) == 0
    assert any("is damaged (its sha256 does not match its name)" in r.getMessage() for r in caplog.records)
    assert "(2 labelled in this run" in capsys.readouterr().out
    assert _ids(out) == world.ids


@pytest.mark.slow
def test_a_kill_during_the_final_write_leaves_no_temp_file_after_the_next_run(world):
    out = world.root / "temp" / "labels.parquet"
    assert label(*label_args(world, out, "--limit", "2")) == 0
    stray = out.parent / f".{out.name}.k1ll3d.tmp"  # what atomic_write leaves when killed mid-write
    stray.write_bytes(b"PAR1 half a file")
    assert label(*label_args(world, out, "--limit", "2", "--resume")) == 0
    assert not stray.exists() and _ids(out) == world.ids[:2]


def _failing_open(monkeypatch, folder, err: int, after: int = 0):
    """Let the OS refuse (errno `err`) every file created under `folder` after `after` successful ones."""
    real, count = os.open, {"n": 0}

    def fake(path, flags, *args, **kwargs):
        if str(path).startswith(str(folder)) and flags & os.O_CREAT:
            count["n"] += 1
            if count["n"] > after:
                raise OSError(err, os.strerror(err), str(path))
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", fake)


@pytest.mark.slow
def test_a_full_disk_mid_run_ends_with_one_line_and_keeps_every_stored_sample(world, monkeypatch, capsys):
    from routedvlm.data.labelling.parts import PartStore

    out = world.root / "full" / "labels.parquet"
    _failing_open(monkeypatch, out.parent, errno.ENOSPC, after=4)  # lock, manifest, two parts
    assert label_cli(*label_args(world, out, "--flush-every", "2")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"error: Cannot write '{out.parent / (out.name + '.parts')}': No space left on device "
                              "(the disk is full: free some space), then rerun the same command with --resume.")
    assert "Every sample stored before is kept." in err[-1] and [e for e in err if e.startswith("error:")] == err[-1:]
    assert len(PartStore(out).done_ids()) == 4
    monkeypatch.undo()
    assert label(*label_args(world, out, "--resume")) == 0
    assert "(2 labelled in this run" in capsys.readouterr().out and _ids(out) == world.ids


def test_a_read_only_folder_ends_with_one_line_naming_the_path(world, monkeypatch, capsys):
    out = world.root / "readonly" / "labels.parquet"
    _failing_open(monkeypatch, out.parent, errno.EROFS)
    assert label_cli(*label_args(world, out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: Cannot write '{out.parent / (out.name + '.parts') / 'lock'}': Read-only file system "
                   "(the file system is read-only: pass an --out on a writable disk), then rerun the same command "
                   "with --resume."]


def test_already_complete_is_trusted_only_when_it_holds_the_selection(world, tmp_path):
    from routedvlm.data.labels.schema import read_labels, write_labels

    out = tmp_path / "labels.parquet"
    assert label(*label_args(world, out, "--limit", "1", "--strategies", "large_direct")) == 0
    df, meta = read_labels(out)
    write_labels(df.iloc[:0], out, meta)  # a file that lost its rows (what two colliding runs used to leave)
    with pytest.raises(LabelsError, match=rf"^{out} holds 0 of the 1 selected samples .*no parts are left"):
        label(*label_args(world, out, "--limit", "1", "--strategies", "large_direct", "--resume"))
