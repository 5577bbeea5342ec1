"""`routedvlm labels import-outcomes`: published two-model outcome tables (RouteLLM, MMR-Bench layouts) become
direct-only labels that validate and train; the cheaper model is small_direct; more than two models are refused."""
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


def test_more_than_two_models_are_refused_with_a_clear_message():
    df = _routellm().assign(**{"claude": True, "claude_response": "z"})
    with pytest.raises(LabelsError, match=r"^import-outcomes maps exactly two models .* has 3: "):
        import_outcomes(df, "routellm")


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
