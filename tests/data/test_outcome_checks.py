"""Issue 39: `routedvlm labels import-outcomes` refuses bad values with one line naming the row, column or flag and
the fix, and writes nothing: NaN / negative / inf / 1e300 costs, duplicate or lookalike ids, an empty table, a 5 MB
prompt cell, `--ms-per-token nan`, `--min-score nan` or 5; a prompt of '[' + 200,000 '-' + '1]' is no MemoryError."""
import pandas as pd
import pytest

from routedvlm.data.labels.cli import main


def _mmr(n=4, changes=None):
    df = pd.DataFrame({"question": [f"q{i}?" for i in range(n)], "big_correct": [1] * n, "big_cost": [5.0] * n,
                       "tiny_correct": [0, 1] * (n // 2), "tiny_cost": [1.0] * n})
    for (col, row), value in (changes or {}).items():
        df[col] = df[col].astype(object)
        df.loc[row, col] = value
    return df


def _routerbench(ids):
    n = len(ids)
    return pd.DataFrame({"sample_id": ids, "prompt": ["['2+2?']"] * n, "eval_name": "e", "a": [1.0] * n,
                         "a|total_cost": [1.0] * n, "a|model_response": "4", "b": [0.0] * n,
                         "b|total_cost": [2.0] * n, "b|model_response": "5"})


def _run(tmp_path, df, layout, *flags):
    src, out = tmp_path / ("table.csv" if layout == "mmr-bench" else "table.parquet"), tmp_path / "labels.parquet"
    df.to_csv(src, index=False) if layout == "mmr-bench" else df.to_parquet(src)
    code = main(["import-outcomes", "--layout", layout, str(src), "--out", str(out), *flags])
    return code, out


@pytest.mark.parametrize("cost", [float("nan"), -1.0, float("inf"), 1e300, "cheap"])
def test_a_bad_cost_is_refused_naming_row_and_column(tmp_path, capsys, cost):
    code, out = _run(tmp_path, _mmr(changes={("tiny_cost", 2): cost}), "mmr-bench")
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert err.startswith("error: Row 2, column 'tiny_cost': cost") and "finite numbers in [0, 1e+09]" in err
    assert err.count("\n") == 1  # one line


@pytest.mark.parametrize("ids,message", [
    (["a", "b", "a", "c"], r"Row 2, column 'sample_id': 'a' repeats row 0"),
    (["a", "b", "\uff41", "c"], r"Row 2, column 'sample_id': 'ａ' looks like 'a' \(row 0\)"),  # fullwidth a
    (["a", "b\u200b", "b", "c"], r"Row 2, column 'sample_id': 'b' looks like"),  # a zero-width space
])
def test_duplicate_or_lookalike_ids_are_refused(tmp_path, capsys, ids, message):
    import re

    code, out = _run(tmp_path, _routerbench(ids), "routerbench")
    assert code == 2 and not out.exists() and re.search(message, capsys.readouterr().err)


def test_an_empty_table_and_a_huge_prompt_are_refused(tmp_path, capsys):
    code, out = _run(tmp_path, _mmr().iloc[:0], "mmr-bench")
    assert code == 2 and not out.exists() and "The outcome table is empty" in capsys.readouterr().err
    code, out = _run(tmp_path, _mmr(changes={("question", 1): "x" * 5_000_000}), "mmr-bench")
    err = capsys.readouterr().err
    assert code == 2 and not out.exists() and "Row 1, column 'question': a prompt of 5000000 characters" in err


def test_bad_flags_are_refused(tmp_path, capsys):
    for flags, message in ((["--min-score", "nan"], "`--min-score` must be a number in (0, 1]"),
                           (["--min-score", "5"], "`--min-score` must be a number in (0, 1]"),
                           (["--ms-per-token", "small=nan"], "`--ms-per-token` small=nan"),
                           (["--ms-per-token", "small=-3"], "`--ms-per-token` small=-3.0")):
        code, out = _run(tmp_path, _mmr(), "mmr-bench", *flags)
        err = capsys.readouterr().err
        assert code == 2 and not out.exists() and err.startswith("error: ") and message in err, (flags, err)


def test_a_deeply_nested_prompt_is_kept_as_text_not_a_memory_error(tmp_path, capsys):
    df = _routerbench(["a", "b"])
    df.loc[0, "prompt"] = "[" + "-" * 50_000 + "1]"
    code, out = _run(tmp_path, df, "routerbench")
    assert code == 0 and out.exists(), capsys.readouterr().err
    assert main(["validate", str(out)]) == 0
    df.loc[0, "prompt"] = "[" + "-" * 200_000 + "1]"  # the case: over the prompt limit, one line
    code, out2 = _run(tmp_path, df.assign(sample_id=["c", "d"]), "routerbench")
    assert code == 2 and "column 'prompt': a prompt of 200003 characters" in capsys.readouterr().err
