"""train-router command line: --help is fast and light, and bad input exits 2 with a clear message and
registers nothing."""
import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from routedvlm.data.labels import compute_labels, strategies_in, write_labels
from routedvlm.training.cli import main
from routedvlm.training.synthetic import make_synthetic_labels


def test_help_is_fast_and_imports_no_heavy_module():
    code = ("import sys\nfrom routedvlm.training.cli import main\n"
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
    ("empty table", lambda df: df.head(0), r"the table is empty \(0 rows\)"),
    ("too many features", lambda df: pd.concat([df, pd.DataFrame({f"feat__prompt__x{i}": np.arange(len(df)) * 1.0 + i for i in range(300)}, index=df.index)], axis=1),
     r"^error: 30\d feature columns selected \(e.g. .*\); the sanity limit is 256 \(--max-features\)"),
    ("constant feature", _constant_feature, r"Constant feature columns \['feat__prompt__option_count'\]"),
    ("too few rows", lambda df: df.head(60), r"The labels have 60 rows; train-router needs at least 80"),
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
    rc, err = _run(capsys, tmp_path, "--data", str(path))
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
    assert rc == 2 and "give exactly one of `target_accuracy` and `max_latency_ms`" in err
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
    assert "learned (tau=" in out.out and (tmp_path / "out" / "router" / "policy.json").is_file()
