"""labels.parquet schema v1: helpers, label computation, validation (every problem at once), atomic I/O, CLI."""
import json

import numpy as np
import pandas as pd
import pytest

from routedvlm.data import labels as L
from routedvlm.data.labels.cli import main as labels_main
from routedvlm.errors import LabelsError

STRATEGIES = ["small_direct", "large_direct", "transfer_16", "transfer_all"]


def make_labels(n=6) -> pd.DataFrame:
    """A hand-made valid table: small_direct is correct on even rows, large_direct on rows 0-2,
    transfer_16 on every row but the last, transfer_all never; latencies small < large < transfer."""
    i = np.arange(n)
    correct = {"small_direct": i % 2 == 0, "large_direct": i < 3, "transfer_16": i < n - 1, "transfer_all": i < 0}
    lat = {"small_direct": 50.0, "large_direct": 180.0, "transfer_16": 400.0, "transfer_all": 900.0}
    df = pd.DataFrame({
        "sample_id": [f"s{k}" for k in i], "dataset": "toy", "task_type": "numeric",
        "question": [f"q{k}?" for k in i], "reference": [json.dumps([str(k)]) for k in i],
    })
    for s in STRATEGIES:
        df[L.answer_col(s)] = [str(k) if c else "x" for k, c in zip(i, correct[s])]
        df[L.correct_col(s)] = correct[s]
        df[L.latency_col(s)] = lat[s] + i.astype(float)
        df[L.tokens_col(s)] = np.full(n, 3, dtype=np.int64)
    df[L.escalate_col(16)] = 220.0 + i
    df[L.escalate_col(None)] = 720.0 + i
    df["feat__prompt__question_words"] = 5.0 + i
    df["feat__large_direct+small_direct__agree"] = (i % 3 == 0).astype(float)
    df["label"] = L.compute_labels(df, STRATEGIES)
    return df


META = {"k_grid": [16], "selector": "prefix"}


def test_worked_example_of_compute_labels():
    # row 0: small ok (50) -> small_direct; row 1: small wrong, large ok -> large_direct;
    # row 3: only transfer_16; row 5: nothing -> none.
    assert list(make_labels()["label"]) == ["small_direct", "large_direct", "small_direct",
                                            "transfer_16", "small_direct", "none"]
    assert list(L.compute_labels(make_labels(), ["large_direct"])) == ["large_direct"] * 3 + ["none"] * 3


def test_column_helpers_and_listing():
    df = make_labels()
    assert L.escalate_col("transfer_64") == "latency_ms__escalate_64"
    assert L.escalate_col("all") == L.escalate_col("transfer_all") == "latency_ms__escalate_all"
    assert L.strategies_in(df) == STRATEGIES
    assert L.k_grid_in(df) == [16]
    assert L.feature_columns(df) == ["feat__prompt__question_words", "feat__large_direct+small_direct__agree"]
    assert L.feature_columns(df, stages=["large_direct"]) == ["feat__prompt__question_words"]
    assert L.classify_column("latency_ms__escalate_16") == ("escalate", "16")


def test_valid_table_and_file_pass(tmp_path):
    df = make_labels()
    assert L.validate_labels(df) == []
    path = L.write_labels(df, tmp_path / "labels.parquet", META)
    assert L.validate_labels(path) == []
    L.check_labels(path)


BROKEN = {
    "missing column": (lambda d: d.drop(columns=["question"]), r"missing required column\(s\) \['question'\]"),
    "extra column": (lambda d: d.assign(notes="x"), r"extra column 'notes'"),
    "unknown strategy": (lambda d: d.assign(**{"answer__medium_direct": "a"}), r"unknown strategy id 'medium_direct'"),
    "incomplete strategy": (lambda d: d.drop(columns=["output_tokens__large_direct"]), r"'large_direct' is incomplete"),
    "no escalate": (lambda d: d.drop(columns=["latency_ms__escalate_16"]), r"lacks its two-stage increment"),
    "wrong dtype": (lambda d: d.assign(correct__small_direct=d["correct__small_direct"].astype(int)),
                    r"'correct__small_direct' must have dtype bool"),
    "int feature": (lambda d: d.assign(feat__prompt__question_words=1), r"'feat__prompt__question_words' must have dtype float"),
    "duplicate id": (lambda d: d.assign(sample_id=["s0", "s0", "s2", "s3", "s4", "s5"]), r"duplicate sample_id value\(s\) 's0'"),
    "empty id": (lambda d: d.assign(sample_id=["", "s1", "s2", "s3", "s4", "s5"]), r"1 row\(s\) have an empty sample_id"),
    "unknown task": (lambda d: d.assign(task_type="essay"), r"unknown task_type value\(s\) 'essay'"),
    "bad stage": (lambda d: d.assign(feat__medium_direct__x=1.0), r"unknown stage"),
    "nan": (lambda d: d.assign(latency_ms__large_direct=np.where(d.index == 2, np.nan, 1.0)),
            r"'latency_ms__large_direct' has 1 missing value\(s\).*'s2'"),
    "bad label": (lambda d: d.assign(label=["large_direct"] + list(d["label"][1:])), r"'label' contradicts .* 1 row\(s\) \(sample_id 's0'\)"),
    "unknown label": (lambda d: d.assign(label="large_reason"), r"'label' value\(s\) 'large_reason' are not strategies"),
    "bad reference": (lambda d: d.assign(reference="not json"), r"'reference' must hold JSON strings; 6 row"),
    "negative latency": (lambda d: d.assign(latency_ms__escalate_all=-1.0), r"'latency_ms__escalate_all' has 6 negative"),
    "inf latency": (lambda d: d.assign(latency_ms__large_direct=np.where(d.index == 1, np.inf, 1.0)),
                    r"^column 'latency_ms__large_direct' has 1 infinite value\(s\) \(sample_id 's1'\); latencies and"),
    "absurd latency": (lambda d: d.assign(latency_ms__escalate_16=1e308),
                       r"^column 'latency_ms__escalate_16' has 6 absurd \(> 1e\+09\) value\(s\)"),
    "inf tokens": (lambda d: d.assign(output_tokens__small_direct=np.where(d.index < 2, np.inf, 3.0)),
                   r"^column 'output_tokens__small_direct' has 2 infinite value\(s\)"),
    "inf feature": (lambda d: d.assign(feat__prompt__question_words=np.where(d.index == 4, -np.inf, np.inf)),
                    r"^feature column 'feat__prompt__question_words' has 6 infinite value\(s\) in 6 row\(s\)"),
    "empty table": (lambda d: d.iloc[:0], r"^the table is empty \(0 rows\)"),
    "all failed": (lambda d: d.assign(error="boom"), r"^no usable rows: all 6 row\(s\) are failed samples"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_each_broken_variant_reports_its_problem(name):
    breaker, pattern = BROKEN[name]
    problems = L.validate_labels(breaker(make_labels()))
    assert any(__import__("re").search(pattern, p) for p in problems), problems


def test_several_problems_at_once_and_check_raises(tmp_path):
    df = make_labels().drop(columns=["question"]).assign(task_type="essay", notes="x")
    problems = L.validate_labels(df)
    assert len(problems) == 3
    with pytest.raises(LabelsError, match=r"^The labels table does not follow labels schema version 1 \(3 problem"):
        L.check_labels(df)


def test_nan_features_are_missing_values_not_problems():
    df = make_labels().assign(feat__prompt__question_words=np.nan)
    assert L.validate_labels(df) == []


def test_failed_rows_are_excluded_from_value_checks():
    df = make_labels()
    df["error"] = [None] * 5 + ["OOM"]
    df["latency_ms__large_direct"] = df["latency_ms__large_direct"].where(df.index != 5)
    df["correct__large_direct"] = df["correct__large_direct"].astype(object).where(df.index != 5, None)
    df.loc[5, "label"] = "transfer_all"  # contradicts, but the row failed
    assert L.validate_labels(df) == []


def test_metadata_problems(tmp_path):
    df = make_labels()
    path = tmp_path / "l.parquet"
    df.to_parquet(path)
    assert L.validate_labels(path) == ["metadata 'routedvlm' is missing; write the file with routedvlm.data.labels.write_labels"]
    assert any("schema_version must be 1, got 2" in p for p in L.validate_labels(df, {"schema_version": 2}))
    meta = {"schema_version": 1, "content_hash": L.content_hash(df), "k_grid": [16, 32]}
    assert L.validate_labels(df, meta) == ["metadata k_grid [16, 32] does not match the transfer_<K> columns (K = [16])"]
    edited = df.assign(question="changed")
    assert any(p.startswith("bad content hash") for p in L.validate_labels(edited, {**meta, "k_grid": [16]}))


def test_round_trip_keeps_metadata_and_hash(tmp_path):
    df = make_labels()
    path = L.write_labels(df, tmp_path / "sub" / "labels.parquet", META)
    back, meta = L.read_labels(path)
    assert meta["selector"] == "prefix" and meta["schema_version"] == 1
    assert meta["content_hash"] == L.content_hash(df) == L.content_hash(back)
    assert L.content_hash(df.iloc[::-1]) == L.content_hash(df)  # row order does not matter
    pd.testing.assert_frame_equal(back, df, check_dtype=False)


def test_atomic_write_keeps_old_file_when_writing_fails(tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    path = L.write_labels(make_labels(), tmp_path / "labels.parquet", META)
    before = path.read_bytes()

    def partial_then_fail(table, where, **kw):
        open(where, "wb").write(b"PAR1 partial")
        raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", partial_then_fail)
    with pytest.raises(OSError, match="^disk full$"):
        L.write_labels(make_labels(3), path, META)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["labels.parquet"]  # no temp file left


def test_read_errors(tmp_path):
    with pytest.raises(LabelsError, match=r"^No labels file at "):
        L.read_labels(tmp_path / "missing.parquet")
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(LabelsError, match=r"is not a readable parquet file"):
        L.read_labels(tmp_path / "bad.parquet")


def test_cli_validate(tmp_path, capsys):
    good = L.write_labels(make_labels(), tmp_path / "good.parquet", META)
    assert labels_main(["validate", str(good)]) == 0
    assert capsys.readouterr().out.startswith("OK: 6 rows, strategies small_direct, large_direct, transfer_16, transfer_all, K grid 16")
    bad = L.write_labels(make_labels().assign(task_type="essay"), tmp_path / "bad.parquet", META)
    assert labels_main(["validate", str(bad), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and report["rows"] == 6 and len(report["problems"]) == 1
    with pytest.raises(LabelsError, match=r"^No labels file at "):
        labels_main(["validate", str(tmp_path / "nope.parquet")])


def test_cli_dispatcher_prints_error_for_missing_file(tmp_path, capsys):
    from routedvlm.cli import main

    assert main(["labels", "validate", str(tmp_path / "nope.parquet")]) == 2
    assert capsys.readouterr().err.startswith("error: No labels file at ")


def test_cli_help_is_fast_to_import():
    import subprocess
    import sys

    code = "import sys; from routedvlm.data.labels.cli import main; print(sorted(m for m in ('pandas', 'pyarrow', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr
    with pytest.raises(SystemExit) as exc:
        labels_main(["validate", "--help"])
    assert exc.value.code == 0


def test_written_labels_get_the_usual_permissions(tmp_path):
    """Regression: atomic writes went through mkstemp and left labels files readable by their owner only."""
    import os

    from routedvlm.data.labels.schema import atomic_write

    umask = os.umask(0o022)
    try:
        path = tmp_path / "labels.parquet"
        atomic_write(path, lambda tmp: open(tmp, "wb").write(b"x"))
        assert (path.stat().st_mode & 0o777) == 0o644
        assert [p.name for p in tmp_path.iterdir()] == ["labels.parquet"]
    finally:
        os.umask(umask)


def _pyarrow_filtered(path, out):
    """A labels file filtered with pyarrow: the schema (and the routedvlm metadata) is kept, the hash is stale."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    pq.write_table(table.filter(pc.not_equal(table["sample_id"], "s5")), out)
    return out


def test_labels_from_other_writers_are_valid_with_warnings(tmp_path, capsys):
    """pyarrow-filtered (stale content hash) and pandas-written (no routedvlm metadata) tables: the schema checks
    pass, the metadata problems are warnings; `--strict` (and the library default) keeps them problems."""
    good = L.write_labels(make_labels(), tmp_path / "good.parquet", META)
    filtered = _pyarrow_filtered(good, tmp_path / "filtered.parquet")
    problems, warnings = L.validate_labels(filtered), None
    assert len(problems) == 1 and problems[0].startswith("bad content hash")
    from routedvlm.data.labels.validate import inspect_labels

    assert inspect_labels(filtered, strict=False) == ([], problems)
    by_pandas = tmp_path / "pandas.parquet"
    L.read_labels(good)[0].query("sample_id != 's0'").to_parquet(by_pandas)
    problems, warnings = inspect_labels(by_pandas, strict=False)
    assert problems == [] and warnings == [
        "metadata 'routedvlm' is missing; write the file with routedvlm.data.labels.write_labels"]
    assert labels_main(["validate", str(by_pandas)]) == 0
    assert "warning: metadata 'routedvlm' is missing" in capsys.readouterr().err
    assert labels_main(["validate", str(filtered), "--strict"]) == 1
    assert "bad content hash" in capsys.readouterr().err
    broken = make_labels().assign(task_type="essay")
    broken.to_parquet(tmp_path / "broken.parquet")  # schema problems stay problems, with the warnings beside them
    with pytest.raises(LabelsError, match=r"(?s)unknown task_type value.*warning: metadata 'routedvlm' is missing"):
        L.check_labels(tmp_path / "broken.parquet", strict=False)


def test_a_folder_or_glob_of_parquet_files_is_one_labels_set(tmp_path):
    """What Ray / Spark write: part files in a folder (with _SUCCESS and .crc side files), read as one table."""
    df = make_labels()
    out = tmp_path / "ray_out"
    out.mkdir()
    df.iloc[:4].to_parquet(out / "part-00000.parquet")
    df.iloc[4:].to_parquet(out / "part-00001.parquet")
    (out / "_SUCCESS").write_text("")
    (out / ".part-00000.parquet.crc").write_text("crc")
    for source in (out, f"{out}/part-*.parquet"):
        back, meta = L.read_labels(source)
        assert meta == {} and sorted(back["sample_id"]) == sorted(df["sample_id"])
        assert L.content_hash(back) == L.content_hash(df)
        assert L.validate_labels(source, strict=False) == []
    with pytest.raises(LabelsError, match=r"^No labels file at .*no parquet file matches"):
        L.read_labels(tmp_path / "empty_dir*")
