"""train-router command line: --help is fast and light, and bad input exits 2 with a clear message and
registers nothing."""
import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from routedvlm.data.labels.schema import compute_labels, strategies_in, write_labels
from routedvlm.cli import main
from routedvlm.training.synthetic import make_synthetic_labels


def test_help_is_fast_and_imports_no_heavy_module():
    code = ("import sys\nfrom routedvlm.cli import main\n"
            "try:\n    main(['train', '--help'])\nexcept SystemExit as e:\n    assert e.code == 0\n"
            "heavy = [m for m in ('torch', 'lightgbm', 'mlflow', 'transformers', 'matplotlib', 'sklearn') if m in sys.modules]\n"
            "print('HEAVY', heavy)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "HEAVY []" in out.stdout
    for flag in ("--data", "--mode", "--target-accuracy", "--max-latency-ms", "--strategies", "--features",
                 "--register-as", "--promote", "--no-register", "--tracking-uri", "--output-dir", "--seed"):
        assert flag in out.stdout
    assert "example:\n  train-router --data labels.parquet" in out.stdout
    assert out.stdout.startswith("usage: routedvlm train ")  # the name it was called by


def test_train_router_help_and_version_name_the_command(capsys):
    from importlib.metadata import version

    from routedvlm.cli import train_router_main

    for argv, call in ((["--help"], train_router_main), (["--version"], train_router_main),
                       (["train", "--version"], main)):
        with pytest.raises(SystemExit) as exc:
            call(argv)
        assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: train-router ") and out.count(f"routedvlm {version('routedvlm')}\n") == 2
    assert main(["--version"]) == 0 and capsys.readouterr().out == f"routedvlm {version('routedvlm')}\n"


def test_progress_bars_redraw_rarely_when_stderr_is_not_a_terminal():
    """`make demo > log` used to get ~1,150 bar updates; through the routedvlm command a log file now gets one redraw
    every 30 s at most (tqdm reads TQDM_MININTERVAL when it is imported, after the dispatcher set it)."""
    code = ("import time\nfrom routedvlm import cli\ncli._quiet_progress_when_not_a_tty()\n"
            "from tqdm.auto import tqdm\nfor _ in tqdm(range(200)):\n    time.sleep(0.002)\n")
    env = {k: v for k, v in __import__("os").environ.items() if k != "TQDM_MININTERVAL"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("\r") <= 3  # first draw and close; a terminal bar (every 0.1 s) redraws 4+ times in 0.4 s


@pytest.fixture(scope="module")
def base_df():
    return make_synthetic_labels(400, seed=5)


def _write(df, path, relabel=True):
    df = df.copy()
    if relabel:
        df["label"] = compute_labels(df, strategies_in(df)).to_numpy()
    return write_labels(df, path, {"k_grid": sorted(int(s.split("_")[1]) for s in strategies_in(df)
                                                    if s.startswith("transfer_") and s != "transfer_all")})


def _no_correct(df):
    df = df.copy()
    for c in df.filter(like="correct__").columns:
        df[c] = False
    return df


def _single_strategy(df):
    drop = [c for c in df.columns if c.split("__")[0] in ("answer", "correct", "latency_ms", "output_tokens")
            and not c.endswith("__large_direct")]
    drop += [c for c in df.columns if c.startswith("latency_ms__escalate_") or "small_direct__" in c]
    return df.drop(columns=drop)


def _nan_feature(df):
    df = df.copy()
    df.loc[df.index[::3], "feat__prompt__question_words"] = np.nan
    return df


def _constant_feature(df):
    return df.assign(**{"feat__prompt__option_count": 4.0})


BAD = [
    ("no correct label", _no_correct, r"No candidate strategy is correct on any of the 400 rows"),
    ("single strategy", _single_strategy, r"needs at least two candidate strategies to route between"),
    ("nan feature", _nan_feature, r"Feature columns with NaN or non-numeric values \(rows affected, of 400\): "
                                  r"\{'feat__prompt__question_words': 134\}"),
    ("inf feature", lambda df: _nan_feature(df).replace(np.nan, np.inf),
     r"feature column 'feat__prompt__question_words' has 134 infinite value\(s\) in 400 row\(s\)"),
    ("inf latency", lambda df: df.assign(latency_ms__large_reason=np.where(df.index == 7, np.inf, df["latency_ms__large_reason"])),
     r"column 'latency_ms__large_reason' has 1 infinite value\(s\)"),
    ("all failed", lambda df: df.assign(error="boom"), r"error: The labels have 0 usable row\(s\) \(after dropping 400 "
                                                       r"failed sample\(s\)\)"),
    ("too many features", lambda df: pd.concat([df, pd.DataFrame({f"feat__prompt__x{i}": np.arange(len(df)) * 1.0 + i for i in range(300)}, index=df.index)], axis=1),
     r"^error: 30\d feature columns selected \(e.g. .*\); the sanity limit is 256 \(--max-features\)"),
    ("constant feature, --strict-features", _constant_feature,
     r"Constant feature columns \['feat__prompt__option_count'\] \(on the 240 training rows\)"),
    ("too few rows", lambda df: df.head(60), r"The labels have 60 usable row\(s\); train-router needs at least 80"),
    # the row count comes first: dropping constant features or finding no correct candidate would not help
    ("six rows", lambda df: _constant_feature(df.head(6)), r"error: The labels have 6 usable row\(s\); train-router needs at least 80"),
    ("empty", lambda df: df.head(0), r"error: The labels have 0 usable row\(s\); train-router needs at least 80"),
]


def _run(capsys, tmp_path, *args):
    store = tmp_path / "store"
    rc = main(["train", *args, "--tracking-uri", f"sqlite:///{store}/mlflow.db", "--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert not store.exists() and not (tmp_path / "out").exists()  # nothing logged, registered or written
    return rc, err


@pytest.mark.parametrize("name,mutate,message", BAD, ids=[b[0] for b in BAD])
def test_bad_labels_exit_2_with_a_clear_message(name, mutate, message, base_df, tmp_path, capsys):
    path = _write(mutate(base_df), tmp_path / "labels.parquet")
    strict = ["--strict-features"] if "--strict-features" in name else []
    rc, err = _run(capsys, tmp_path, "--data", str(path), *strict)
    assert rc == 2
    assert "\nerror: " in "\n" + err
    import re

    assert re.search(message, err, re.M), err


def test_missing_file_wrong_schema_and_no_default(base_df, tmp_path, capsys, monkeypatch):
    rc, err = _run(capsys, tmp_path, "--data", str(tmp_path / "nope.parquet"))
    assert rc == 2 and "error: The labels file" in err and "does not exist" in err
    bad = base_df.drop(columns=["reference", "latency_ms__large_direct"]).assign(
        **{"correct__large_reason": "yes"})
    bad.to_parquet(tmp_path / "bad.parquet")  # no metadata, missing columns, wrong dtype: all reported at once
    rc, err = _run(capsys, tmp_path, "--data", str(tmp_path / "bad.parquet"))
    assert rc == 2 and "does not follow labels schema version 1" in err
    assert "reference" in err and "latency_ms__large_direct" in err and "metadata" in err
    import routedvlm.training.labels_io as io

    monkeypatch.setattr(io, "embedded_labels_path", lambda: tmp_path / "absent.parquet")
    rc, err = _run(capsys, tmp_path)
    assert rc == 2 and "No --data given and no embedded toy labels" in err and "Pass --data" in err


def test_bad_flags_exit_2(base_df, tmp_path, capsys):
    path = _write(base_df, tmp_path / "labels.parquet")
    rc, err = _run(capsys, tmp_path, "--data", str(path), "--target-accuracy", "0.9", "--max-latency-ms", "100")
    assert rc == 2 and "give exactly one of `target_accuracy`, `min_accuracy` and `max_latency_ms`" in err
    rc, err = _run(capsys, tmp_path, "--data", str(path), "--strategies", "large_direct,transfer_999")
    assert rc == 2 and "`--strategies` names ['transfer_999'], which the labels do not hold" in err
    rc, err = _run(capsys, tmp_path, "--data", str(path), "--mode", "one-shot", "--features", "large_direct")
    assert rc == 2 and "Mode 'one-shot' may only use prompt features" in err


def test_without_data_uses_the_embedded_labels_and_says_so(base_df, tmp_path, capsys, monkeypatch):
    import routedvlm.training.labels_io as io

    path = _write(base_df, tmp_path / "toy.parquet")
    monkeypatch.setattr(io, "embedded_labels_path", lambda: path)
    rc = main(["train", "--no-mlflow", "--num-boost-round", "10", "--output-dir", str(tmp_path / "out")])
    out = capsys.readouterr()
    assert rc == 0
    assert f"read 400 labelled samples from the embedded toy labels {path}" in out.err
    assert "\nchosen: " in out.out and "certificate: " in out.out
    assert (tmp_path / "out" / "router" / "policy.json").is_file()


@pytest.mark.parametrize("writer", ["pyarrow-filtered", "pandas", "ray-folder", "glob"])
def test_labels_from_any_writer_train_with_a_warning(writer, base_df, tmp_path, capsys, caplog):
    """A filtered table (stale content hash), one written by pandas (no routedvlm metadata) or a folder / glob of
    part files trains; the warning names what is missing, and the hash recorded is the table's as loaded."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from routedvlm.data.labels.schema import content_hash, read_labels

    good = _write(base_df, tmp_path / "good.parquet")
    table = pq.read_table(good)
    data, warning = tmp_path / "labels.parquet", "metadata 'routedvlm' is missing"
    if writer == "pyarrow-filtered":
        pq.write_table(table.filter(pc.not_equal(table["dataset"], "__none__")).slice(0, 300), data)
        warning = "bad content hash"
    elif writer == "pandas":
        table.to_pandas().iloc[:300].to_parquet(data)
    else:
        folder = tmp_path / "out"
        folder.mkdir()
        for i in range(3):
            table.slice(i * 100, 100).to_pandas().to_parquet(folder / f"part-{i:05d}.parquet")
        (folder / "_SUCCESS").write_text("")
        data = folder if writer == "ray-folder" else f"{folder}/part-*.parquet"
    rc = main(["train", "--data", str(data), "--no-mlflow", "--num-boost-round", "10", "--output-dir",
               str(tmp_path / "r")])
    assert rc == 0, capsys.readouterr().err
    assert warning in caplog.text and "training on the table as it is" in caplog.text
    policy = json.loads((tmp_path / "r" / "router" / "policy.json").read_text())
    assert policy["training_data_hash"] == content_hash(read_labels(data)[0]) != read_labels(good)[1]["content_hash"]
