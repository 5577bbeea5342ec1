"""`routedvlm labels import-outcomes`: published outcome tables (RouteLLM, MMR-Bench, RouterBench layouts) of N >= 2
models become direct-only labels of a ladder that validate and train; the cheapest model is small_direct, the dearest
large_direct, the ones between mid_direct / mid<i>_direct."""
import pandas as pd
import pytest

from routedvlm.data.labels.cli import main
from routedvlm.data.labels.outcomes import import_outcomes
from routedvlm.errors import LabelsError

WEAK, STRONG = "mistralai/Mixtral-8x7B-Instruct-v0.1", "gpt-4-1106-preview"


def _routellm(n=6):
    return pd.DataFrame({"prompt": [f"Tom has {i} apples and buys 3 more. How many apples?" for i in range(n)],
                         WEAK: [True, False] * (n // 2), STRONG: ["True"] * n,
                         f"{WEAK}_response": ["x" * 40] * n, f"{STRONG}_response": ["y" * 400] * n})


def test_a_routellm_table_becomes_direct_only_labels_with_the_weak_model_as_small():
    labels = import_outcomes(_routellm(), "routellm")
    assert labels.attrs["models"] == {"small": WEAK, "large": STRONG}
    assert labels["correct__small_direct"].tolist() == [True, False] * 3 and labels["correct__large_direct"].all()
    # cost from the response length: 40 chars = 10 tokens x 10 ms; 400 chars = 100 tokens x 30 ms
    assert labels["latency_ms__small_direct"].iloc[0] == 100.0 and labels["latency_ms__large_direct"].iloc[0] == 3000.0
    assert labels["label"].tolist() == ["small_direct", "large_direct"] * 3
    feats = [c for c in labels.columns if c.startswith("feat__")]
    assert feats and all(c.startswith("feat__prompt__") and "image" not in c for c in feats)
    assert labels["feat__prompt__question_digits"].tolist() == [2.0] * 6  # "{i}" and "3": the runtime's feature code


def test_an_mmr_bench_table_takes_the_cheaper_model_by_its_cost_column():
    df = pd.DataFrame({"question": ["a?", "b?"], "big_correct": [1, 1], "big_cost": [5.0, 7.0],
                       "tiny_correct": [0, 1], "tiny_cost": [1.0, 1.0]})
    labels = import_outcomes(df, "mmr-bench")
    assert labels.attrs["models"] == {"small": "tiny", "large": "big"}
    assert labels["latency_ms__large_direct"].tolist() == [5.0, 7.0]


def test_three_routellm_models_need_their_cost_order_and_then_map_onto_the_ladder():
    df = _routellm().assign(**{"claude": [True, True, False] * 2, "claude_response": "z" * 80})
    with pytest.raises(LabelsError, match=r"^Cannot tell the cost order of .* name the models cheapest first with --order"):
        import_outcomes(df, "routellm")
    labels = import_outcomes(df, "routellm", order=[WEAK, "claude", STRONG])
    assert labels.attrs["models"] == {"small": WEAK, "mid": "claude", "large": STRONG}
    assert labels.attrs["ladder"] == ["small", "mid", "large"]
    # default prices: small 10, mid 20 (evenly between), large 30 ms per token; 80 chars = 20 tokens
    assert labels["latency_ms__mid_direct"].iloc[0] == 400.0 and labels["latency_ms__large_direct"].iloc[0] == 3000.0
    # the cheapest correct model: mixtral where it is right, else claude where it is right, else gpt-4
    assert labels["label"].tolist() == ["small_direct", "mid_direct", "small_direct", "mid_direct", "small_direct",
                                        "large_direct"]
    with pytest.raises(LabelsError, match=r"^`--order` must list distinct models of the table"):
        import_outcomes(df, "routellm", order=[WEAK, "nope"])
    with pytest.raises(LabelsError, match=r"^`--small` names the cheaper of two models; the table has 3"):
        import_outcomes(df, "routellm", small=WEAK)


def test_order_keeps_a_subset_of_the_models():
    df = _routellm().assign(**{"claude": True, "claude_response": "z"})
    labels = import_outcomes(df, "routellm", order=["claude", STRONG])
    assert labels.attrs["models"] == {"small": "claude", "large": STRONG}
    assert "correct__mid_direct" not in labels.columns


def test_the_cli_writes_labels_that_validate(tmp_path, capsys):
    src = tmp_path / "gsm8k.csv"
    _routellm(40).to_csv(src, index=False)
    out = tmp_path / "labels.parquet"
    assert main(["import-outcomes", "--layout", "routellm", str(src), "--out", str(out), "--ms-per-token",
                 "small=5,large=20"]) == 0
    assert f"wrote 40 rows to {out}: small_direct = {WEAK} (accuracy 0.500)" in capsys.readouterr().out
    assert main(["validate", str(out), "--strict"]) == 0
    assert main(["import-outcomes", "--layout", "routellm", str(src), "--out", str(out), "--small", "nope"]) == 2
    assert "error: `--small` must be one of the table's models" in capsys.readouterr().err


def test_the_cli_imports_a_three_model_table_with_the_ladder_in_its_metadata(tmp_path, capsys):
    from routedvlm.data.labels.schema import read_labels

    df = pd.DataFrame({"question": ["a?", "b?", "c?"], "8B_correct": [1, 1, 1], "8B_cost": [9.0, 9.0, 9.0],
                       "2B_correct": [1, 0, 0], "2B_cost": [1.0, 1.0, 1.0], "4B_correct": [1, 1, 0],
                       "4B_cost": [3.0, 3.0, 3.0]})
    src, out = tmp_path / "mmr.csv", tmp_path / "labels.parquet"
    df.to_csv(src, index=False)
    assert main(["import-outcomes", "--layout", "mmr-bench", str(src), "--out", str(out)]) == 0
    assert ("small_direct = 2B (accuracy 0.333), mid_direct = 4B (accuracy 0.667), large_direct = 8B (accuracy "
            "1.000)") in capsys.readouterr().out
    labels, meta = read_labels(out)
    assert meta["ladder"] == ["small", "mid", "large"] and meta["models"]["mid"]["name"] == "4B"
    assert labels["label"].tolist() == ["small_direct", "mid_direct", "large_direct"]
    assert main(["validate", str(out), "--strict"]) == 0


def _correctness_only(n=6):
    """A RouteLLM-style table with correctness columns only (no response, no cost column)."""
    return pd.DataFrame({"prompt": [f"q{i}: 2 + {i}?" for i in range(n)], "cheap-model": [True, False] * (n // 2),
                         "dear-model": [True] * n})


def test_a_table_without_response_or_cost_columns_is_refused_naming_the_flag():
    with pytest.raises(LabelsError, match=r"no `<model>_response`.*--cost-ms 'cheap-model=1,dear-model=10'"):
        import_outcomes(_correctness_only(), "routellm")


def test_costs_per_call_from_the_command_line_import_such_a_table_in_cost_order(tmp_path, capsys):
    labels = import_outcomes(_correctness_only(), "routellm", cost_ms={"dear-model": 40.0, "cheap-model": 4.0})
    assert labels.attrs["models"] == {"small": "cheap-model", "large": "dear-model"}  # ordered by the given cost
    assert labels["latency_ms__small_direct"].tolist() == [4.0] * 6 and labels["latency_ms__large_direct"].eq(40).all()
    assert labels["correct__small_direct"].tolist() == [True, False] * 3
    src = tmp_path / "t.csv"
    _correctness_only().to_csv(src, index=False)
    out = tmp_path / "labels.parquet"
    assert main(["import-outcomes", "--layout", "routellm", str(src), "--cost-ms", "cheap-model=4,dear-model=40",
                 "--out", str(out)]) == 0
    from routedvlm.data.labels.schema import read_labels

    got, meta = read_labels(out)
    assert got["latency_ms__large_direct"].eq(40).all() and "--cost-ms" in meta["costs"]


@pytest.mark.parametrize("costs, why", [({"cheap-model": 1.0, "nope": 2.0}, "no correctness column 'nope'"),
                                        ({"cheap-model": 1.0, "dear-model": float("nan")}, "finite number"),
                                        ({"cheap-model": 1.0, "dear-model": -3}, "finite number")])
def test_bad_costs_per_call_are_refused_by_name(costs, why):
    with pytest.raises(LabelsError, match=why):
        import_outcomes(_correctness_only(), "routellm", cost_ms=costs)
