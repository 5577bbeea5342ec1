"""The toy world's effect checker on a hand-made labels table (worked example)."""
import pandas as pd
import pytest

from routedvlm.data.toyworld.effects import check_effects, effect_table

STRATS = ("small_direct", "large_direct", "small_reason", "large_reason", "transfer_all")


def _labels(correct: dict, latency: dict) -> pd.DataFrame:
    # 4 samples: two easy (2 and 3 bars), two hard (5 and 6 bars)
    df = pd.DataFrame({"question": [f"{n} bars. Red sum times blue count?" for n in (2, 3, 5, 6)]})
    for s in STRATS:
        df[f"correct__{s}"] = correct[s]
        df[f"latency_ms__{s}"] = [float(latency[s])] * 4
        df[f"output_tokens__{s}"] = [3] * 4
    return df


def test_effects_worked_example():
    correct = {"small_direct": [1, 0, 0, 0], "large_direct": [1, 1, 1, 0], "small_reason": [1, 1, 1, 0],
               "large_reason": [1, 1, 1, 1], "transfer_all": [1, 1, 1, 1]}
    latency = {"small_direct": 10, "large_direct": 20, "small_reason": 60, "large_reason": 100, "transfer_all": 90}
    table, n_hard, n_easy = effect_table(_labels(correct, latency))
    assert (n_hard, n_easy) == (2, 2)
    assert table.loc["small_direct", "acc"] == 25.0
    assert table.loc["large_direct", "hard"] == 50.0
    assert table.loc["transfer_all", "hard"] == 100.0
    holds = {name[:3]: ok for name, ok, _ in check_effects(table)}
    assert holds == {"(a)": True, "(b)": True, "(c)": True, "(d)": True}


@pytest.mark.parametrize("change,effect", [
    ({"small_reason": [1, 0, 0, 0]}, "(a)"),          # reasoning does not help the small model
    ({"transfer_all": [1, 1, 1, 0]}, "(c)"),          # transfer does not lift the hard samples
    ({"transfer_all": [1, 1, 1, 1], "large_reason": [1, 1, 0, 0]}, "(d)"),
])
def test_each_effect_can_fail(change, effect):
    correct = {"small_direct": [1, 0, 0, 0], "large_direct": [1, 1, 1, 0], "small_reason": [1, 1, 1, 0],
               "large_reason": [1, 1, 1, 1], "transfer_all": [1, 1, 1, 1], **change}
    latency = {"small_direct": 10, "large_direct": 20, "small_reason": 60, "large_reason": 100, "transfer_all": 90}
    table, _, _ = effect_table(_labels(correct, latency))
    failed = {name[:3] for name, ok, _ in check_effects(table) if not ok}
    assert effect in failed
