"""A side's outage never becomes a sample's answer: the run stops non-zero keeping what it wrote, `--resume` labels
the samples again (also rows an older run stored for an outage), only a sample's own failure (an undecodable image)
is stored as a failed row, and the output reached through a symlink is locked and written at its target."""
import pytest
from test_labelling import BROKEN, N_ROWS, _args, _label, world  # noqa: F401 - the module-scoped fixture

from routedvlm.errors import LabelsError, SideUnavailableError

DOWN = "s003"
LEGACY = ("The OpenAI-compatible server http://127.0.0.1:9/v1 failed the chat completion request (x-request-id "
          "routedvlm-0) after 3 attempt(s): ConnectError: [Errno 111] Connection refused. Check that the server is "
          "running and serves this model.")


def _fail_on(monkeypatch, sample_id, exc):
    from routedvlm.data.labelling import per_sample as samples

    real = samples.label_sample

    def label_sample(pipe, sample, *args, **kwargs):
        if sample.sample_id == sample_id:
            raise exc
        return real(pipe, sample, *args, **kwargs)

    monkeypatch.setattr(samples, "label_sample", label_sample)


def _rows(out):
    from routedvlm.data.labels.schema import read_labels

    df, _ = read_labels(out)
    return df.set_index("sample_id")


def test_an_outage_stops_the_run_and_resume_labels_the_rest(world, tmp_path, monkeypatch, capsys):  # noqa: F811
    from routedvlm.data.labelling.parts import PartStore

    out = tmp_path / "labels.parquet"
    _fail_on(monkeypatch, DOWN, SideUnavailableError("The OpenAI-compatible server http://x/v1 failed ... HTTP 503"))
    with pytest.raises(SideUnavailableError, match=r"HTTP 503 The run stopped: 3 labelled sample\(s\) are kept in "
                                                   r".*labels\.parquet\.parts; rerun the same command with --resume"):
        _label(*_args(world, out, "--flush-every", "1"))
    assert PartStore(out).done_ids() == {"s000", BROKEN, "s002"} and not out.exists()
    monkeypatch.undo()
    assert _label(*_args(world, out, "--resume")) == 0
    assert "(2 labelled in this run" in capsys.readouterr().out
    df = _rows(out)
    assert sorted(df.index) == [f"s{i:03d}" for i in range(N_ROWS)]
    assert list(df.index[df["error"].notna()]) == [BROKEN]  # the sample's own failure only


def test_outage_rows_an_older_run_stored_are_labelled_again(world, tmp_path, monkeypatch, capsys):  # noqa: F811
    from routedvlm.data.labelling.parts import PartStore, is_outage
    from routedvlm.errors import BackendError

    assert is_outage(f"BackendError: {LEGACY}") and is_outage("SideUnavailableError: down")
    assert not is_outage("BackendError: The OpenAI-compatible server http://x/v1 failed the chat completion request "
                         "(x-request-id r) after 1 attempt(s): HTTP 400: prompt too long.")
    assert not is_outage("ImageLoadError: Sample 's001' ...")
    out = tmp_path / "labels.parquet"
    _fail_on(monkeypatch, DOWN, BackendError(LEGACY))  # what runs before SideUnavailableError stored as a row
    with pytest.raises(LabelsError, match=r"^1 of the 5 selected samples are not in .*--resume to label them"):
        _label(*_args(world, out, "--flush-every", "1"))
    assert DOWN not in PartStore(out).done_ids()
    monkeypatch.undo()
    assert _label(*_args(world, out, "--resume")) == 0
    assert "1 stored side outage(s) labelled again; 1 failed (the sample's own failure)" in capsys.readouterr().out
    assert list(_rows(out).index[_rows(out)["error"].notna()]) == [BROKEN]


def test_a_symlinked_output_is_locked_and_written_at_its_target(world, tmp_path):  # noqa: F811
    from routedvlm.data.labelling.parts import PartStore

    target = tmp_path / "real" / "labels.parquet"
    target.parent.mkdir()
    target.write_bytes(b"")
    link = tmp_path / "link.parquet"
    link.symlink_to(target)
    assert PartStore(link).dir == PartStore(target).dir  # one lock for both names
    target.unlink()
    assert _label(*_args(world, link)) == 0
    assert link.is_symlink() and sorted(_rows(target).index) == [f"s{i:03d}" for i in range(N_ROWS)]


def test_a_finished_output_with_outage_rows_is_reopened_by_resume(world, tmp_path, capsys):  # noqa: F811
    """An output an older version finished with a side's outage recorded as a row: `--resume` no longer says
    'already complete' but labels that sample again, keeping the others."""
    from routedvlm.data.labels.schema import read_labels, write_labels

    out = tmp_path / "labels.parquet"
    assert _label(*_args(world, out)) == 0
    df, meta = read_labels(out)
    before = df.set_index("sample_id").loc["s000"].to_dict()
    df.loc[df["sample_id"] == DOWN, "error"] = f"BackendError: {LEGACY}"
    write_labels(df, out, {k: v for k, v in meta.items() if k not in ("content_hash", "schema_version")})
    capsys.readouterr()
    assert _label(*_args(world, out, "--resume")) == 0
    said = capsys.readouterr().out
    assert "(1 labelled in this run" in said and "1 stored side outage(s) labelled again" in said
    rows = _rows(out)
    assert sorted(rows.index) == [f"s{i:03d}" for i in range(N_ROWS)] and list(rows.index[rows["error"].notna()]) == [BROKEN]
    assert rows.loc["s000"].to_dict() == before  # kept as it was, not relabelled
    assert not (tmp_path / "labels.parquet.parts").exists()
