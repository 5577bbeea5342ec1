"""Reading a labels set is bounded: metadata depth and size, row count, cell sizes (refused from the footers or the
Arrow table, before a DataFrame exists), schema versions newer than the code, non-JSON metadata refused by both
`labels validate` and train-router's loader, lookalike duplicate sample ids refused."""
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_labels import META, make_labels

from routedvlm.data import labels as L
from routedvlm.data.labels.cli import main as labels_main
from routedvlm.errors import LabelsError


def _with_metadata(df, raw: bytes, path):
    table = pa.Table.from_pandas(df, preserve_index=False)
    pq.write_table(table.replace_schema_metadata({b"routedvlm": raw}), path)
    return path


def _load(path):
    from routedvlm.training.labels_io import load_labels

    return load_labels(path)


@pytest.mark.parametrize("raw, problem", [
    (b"[" * 100_000 + b"]" * 100_000, "metadata 'routedvlm' nests JSON 100000 levels deep, more than the limit of 64"),
    (b'{"pad": "' + b"x" * (2 * 2**20) + b'"}', "metadata 'routedvlm' is 2097163 bytes, more than the limit of 1048576"),
    (b"not json at all", "metadata 'routedvlm' is not valid JSON"),
    (b"[1, 2]", "metadata 'routedvlm' must be a JSON object, got list"),
])
def test_unreadable_metadata_is_refused_by_validate_and_by_train_router(tmp_path, capsys, raw, problem):
    path = _with_metadata(make_labels(), raw, tmp_path / "l.parquet")
    assert labels_main(["validate", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"  - {problem}" in err and "Traceback" not in err
    with pytest.raises(LabelsError, match=f"^{path}: {problem[:40]}"):
        _load(path)


def test_a_newer_schema_version_is_refused_with_a_message(tmp_path):
    df = make_labels()
    path = _with_metadata(df, b'{"schema_version": 999}', tmp_path / "l.parquet")
    newer = r"^This labels set has schema_version 999, newer than the version 2 this routedvlm reads\. Upgrade"
    with pytest.raises(LabelsError, match=newer):
        labels_main(["validate", str(path)])
    with pytest.raises(LabelsError, match=newer):
        _load(path)


def test_row_count_is_refused_from_the_footer_before_reading(tmp_path, monkeypatch):
    path = L.write_labels(make_labels(6), tmp_path / "l.parquet", META)
    monkeypatch.setenv("ROUTEDVLM_LABELS_MAX_ROWS", "5")

    def no_read(*a, **k):
        raise AssertionError("the table was read")

    monkeypatch.setattr(pq, "read_table", no_read)
    msg = r": row count 6 passes the limit of 5 \(raise it with ROUTEDVLM_LABELS_MAX_ROWS if this set is genuine\)\.$"
    with pytest.raises(LabelsError, match=msg):
        labels_main(["validate", str(path)])
    with pytest.raises(LabelsError, match=msg):
        _load(path)


def test_oversized_cells_are_refused_naming_the_column_and_limit(tmp_path, monkeypatch):
    df = make_labels()
    df.loc[0, "sample_id"] = "s" * 2000
    path = L.write_labels(df, tmp_path / "ids.parquet", META)
    with pytest.raises(LabelsError, match=r"a cell of column 'sample_id' holds 2000 bytes, which passes the limit of 1024 "
                                          r"\(raise it with ROUTEDVLM_LABELS_MAX_ID_BYTES"):
        labels_main(["validate", str(path)])
    monkeypatch.setenv("ROUTEDVLM_LABELS_MAX_CELL_BYTES", "100")
    long = L.write_labels(make_labels().assign(question="q" * 101), tmp_path / "q.parquet", META)
    with pytest.raises(LabelsError, match=r"a cell of column 'question' holds 101 bytes, which passes the limit of 100 "):
        _load(long)
    assert L.read_labels(L.write_labels(make_labels().assign(question="q" * 100), tmp_path / "ok.parquet", META))


@pytest.mark.parametrize("lookalike", ["s1\u200b", "\uff53\uff11", "s\u20601"])
def test_lookalike_duplicate_ids_are_refused(tmp_path, lookalike):
    df = make_labels()
    df.loc[0, "sample_id"] = lookalike  # looks like row 1's "s1" once normalised
    problems = L.validate_labels(df)
    assert problems == [f"lookalike sample_id value(s) 's1', {lookalike!r}: equal after NFKC normalisation "
                        "and removing zero-width characters; give them distinct ids"]
    path = L.write_labels(df, tmp_path / "l.parquet", META)
    assert labels_main(["validate", str(path)]) == 1
    with pytest.raises(LabelsError, match="lookalike sample_id"):
        _load(path)
