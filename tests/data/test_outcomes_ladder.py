"""Outcome tables of more than two models through `train-router`: a RouterBench-layout table of four models and an
MMR-Bench-layout table of three (fixtures in the published column layouts; the data cannot be downloaded here) become
ladder labels (`small`, `mid`/`mid<i>`, `large` by cost) on which a size router is trained and certified."""
import numpy as np
import pandas as pd
import pytest

from routedvlm.data.labels.cli import main as labels_main
from routedvlm.errors import LabelsError

# RouterBench model names and a price per call (dollars) in its `<M>|total_cost` column; the fixture's `skill` is
# how many numbers in the prompt a model adds up reliably, so the prompt's digit count tells which model suffices.
ROUTERBENCH = {"gpt-4-1106-preview": (0.01, 9.0), "meta/llama-2-70b-chat": (0.0009, 4.0),
               "mistralai/mixtral-8x7b-chat": (0.0002, 1.5), "gpt-3.5-turbo-1106": (0.0005, 3.0)}


def routerbench_table(n=400, seed=0) -> pd.DataFrame:
    """The wide RouterBench layout: sample_id, prompt (repr of the turns), eval_name, per model the score, the
    response and the total cost; models in file order not sorted by cost."""
    rng = np.random.default_rng(seed)
    terms = rng.integers(0, 6, n)
    prompts = [repr([f"Add {' + '.join(str(int(x)) for x in rng.integers(10, 99, k + 1))}."]) for k in terms]
    df = pd.DataFrame({"sample_id": [f"grade-school-math.dev.{i}" for i in range(n)], "prompt": prompts,
                       "eval_name": "grade-school-math"})
    for model, (price, skill) in ROUTERBENCH.items():
        df[model] = (rng.random(n) < 1 / (1 + np.exp(terms - skill))).astype(float)
        df[f"{model}|model_response"] = "The sum is 42."
        df[f"{model}|total_cost"] = price * rng.uniform(0.8, 1.2, n)
    df["oracle_model_to_route_to"] = "gpt-4-1106-preview"
    return df


def test_a_routerbench_table_maps_its_models_onto_a_four_model_ladder_by_cost():
    from routedvlm.data.labels.outcomes import import_outcomes

    df = routerbench_table(8)
    df.loc[0, "gpt-3.5-turbo-1106"] = 0.6  # a graded (non-binary) score: correct from --min-score
    labels = import_outcomes(df, "routerbench")
    assert labels.attrs["models"] == {"small": "mistralai/mixtral-8x7b-chat", "mid1": "gpt-3.5-turbo-1106",
                                      "mid2": "meta/llama-2-70b-chat", "large": "gpt-4-1106-preview"}
    assert labels["sample_id"].tolist() == df["sample_id"].tolist()
    assert labels["question"].iloc[0] == eval(df["prompt"].iloc[0])[0]  # the turns, not their repr
    assert labels["latency_ms__mid2_direct"].tolist() == df["meta/llama-2-70b-chat|total_cost"].tolist()
    assert bool(labels["correct__mid1_direct"].iloc[0])
    assert not import_outcomes(df, "routerbench", min_score=0.7)["correct__mid1_direct"].iloc[0]
    df.loc[1, "gpt-4-1106-preview"] = 7.0
    with pytest.raises(LabelsError, match=r"^Column 'gpt-4-1106-preview' must hold scores in \[0, 1\]"):
        import_outcomes(df, "routerbench")


@pytest.mark.parametrize("layout", ["routerbench", "mmr-bench"])
def test_train_router_certifies_a_size_router_on_imported_ladder_labels(tmp_path, layout, capsys):
    from routedvlm.training.config import TrainConfig
    from routedvlm.training.pipeline import train_router

    df = routerbench_table()
    if layout == "mmr-bench":  # the same outcomes of three of the models in MMR-Bench's columns
        keep = ["mistralai/mixtral-8x7b-chat", "meta/llama-2-70b-chat", "gpt-4-1106-preview"]
        df = pd.DataFrame({"question": [eval(p)[0] for p in df["prompt"]],
                           **{f"{m.split('/')[-1]}_{k}": df[m if k == "correct" else f"{m}|total_cost"]
                              for m in keep for k in ("correct", "cost")}})
    src, out = tmp_path / "table.csv", tmp_path / "labels.parquet"
    df.to_csv(src, index=False)
    assert labels_main(["import-outcomes", "--layout", layout, str(src), "--out", str(out)]) == 0
    aliases = ["small", "mid1", "mid2", "large"] if layout == "routerbench" else ["small", "mid", "large"]
    printed = capsys.readouterr().out
    assert all(f"{a}_direct = " in printed for a in aliases), printed
    cfg = TrainConfig(data=str(out), no_mlflow=True, mode="one-shot", num_boost_round=30, num_leaves=4, cv_folds=0,
                      output_dir=str(tmp_path / "router"), min_accuracy=0.8)
    result = train_router(cfg)
    assert result.router.policy.strategies == [f"{a}_direct" for a in aliases]
    assert all(c.startswith("feat__prompt__") for c in result.router.policy.features)
    ev = result.evaluation
    assert ev["certificate"]["certified"] and ev["target_met_test"]
    rows = {r["name"]: r for r in ev["rows"]}
    chosen = ev["rows"][-1]
    # the size router beats always-large on cost and uses more than one rung of the ladder
    assert chosen["mean_latency_ms"] < 0.8 * rows["large_direct"]["mean_latency_ms"]
    assert len([s for s, share in chosen["mix"].items() if share > 0.05]) >= 2
