"""train-router on a three-model ladder: the climb's cost model (a worked example), synthetic ladder labels with a
useful middle model, the trained and certified ladder policy, its evaluation table beside every two-model sub-pair,
and the saved router's climb."""
import numpy as np
import pandas as pd
import pytest

from routedvlm.router import load_router, next_action
from routedvlm.router.strategies import ladder_strategies, strategy_models
from routedvlm.training.calibration.rule_family import baseline_members
from routedvlm.training.config import TrainConfig
from routedvlm.training.costs import expected_costs, incremental_costs, paid_latency, realized_latency
from routedvlm.training.pipeline import train_router
from routedvlm.training.synthetic_ladder import LADDER, ladder_metadata, make_ladder_labels

IDS = ["small_direct", "mid_direct", "large_direct", "transfer_small_mid_16", "transfer_16"]


def hand_labels() -> pd.DataFrame:
    """Two rows a reader can price by hand."""
    lat = {"small_direct": [10, 20], "mid_direct": [30, 40], "large_direct": [100, 200],
           "transfer_small_mid_16": [70, 80], "transfer_16": [150, 250]}
    cols = {}
    for s, v in lat.items():
        cols[f"correct__{s}"] = [True, False]
        cols[f"latency_ms__{s}"] = np.array(v, dtype=float)
    cols["latency_ms__escalate_small_mid_16"] = [45.0, 55.0]
    cols["latency_ms__escalate_16"] = [60.0, 65.0]
    return pd.DataFrame(cols)


def test_the_climb_pays_its_stages_then_the_chosen_increment():
    df = hand_labels()
    climb = ["small_direct", "mid_direct"]
    assert paid_latency(df, "cascade", climb).tolist() == [40.0, 60.0]
    inc = incremental_costs(df, IDS, "cascade", climb)
    assert inc["small_direct"].tolist() == [0, 0] and inc["mid_direct"].tolist() == [0, 0]  # accepting a paid answer
    assert inc["transfer_small_mid_16"].tolist() == [45.0, 55.0]  # mid continues its cached prefix: escalate column
    assert inc["transfer_16"].tolist() == [150.0, 250.0]  # large_direct was not paid: the one-stage transfer
    assert inc["large_direct"].tolist() == [100.0, 200.0]
    chosen = ["mid_direct", "transfer_16"]
    assert realized_latency(df, chosen, "cascade", climb).tolist() == [40.0, 60.0 + 250.0]
    # paying large_direct too: the small -> large transfer is its escalation (`latency_ms__escalate_16`)
    assert incremental_costs(df, ["transfer_16"], "cascade", ["small_direct", "large_direct"])["transfer_16"].tolist() \
        == [60.0, 65.0]
    # a ladder's cascade pays exactly its stages; a pair's always pays large_direct (as before)
    assert paid_latency(df, "cascade", ["small_direct"]).tolist() == [10.0, 20.0]
    pair = df[[c for c in df.columns if "mid" not in c]]
    assert paid_latency(pair, "cascade", ["small_direct"]).tolist() == [110.0, 220.0]
    assert expected_costs(df, ["mid_direct"], "one-shot") == {"mid_direct": 35.0}


@pytest.fixture(scope="module")
def ladder_labels():
    df = make_ladder_labels(1500, seed=1)
    return df, ladder_metadata(df, 1)


def test_synthetic_ladder_has_a_useful_middle_model(ladder_labels):
    df, meta = ladder_labels
    assert meta["ladder"] == list(LADDER) and set(meta["models"]) == set(LADDER)
    assert set(ladder_strategies(LADDER, (16, 64, 256))) <= {c[len("correct__"):] for c in df if c.startswith("correct__")}
    acc = {s: df[f"correct__{s}"].mean() for s in ("small_direct", "mid_direct", "large_direct")}
    ms = {s: df[f"latency_ms__{s}"].mean() for s in ("small_direct", "mid_direct", "large_direct")}
    assert acc["small_direct"] < acc["mid_direct"] < acc["large_direct"] and ms["mid_direct"] < 0.7 * ms["large_direct"]
    rescued = (~df["correct__small_direct"] & df["correct__mid_direct"]).mean()
    assert rescued > 0.15  # mid is often right where small is wrong
    assert (df["label"] == "mid_direct").mean() > 0.15  # and often the cheapest correct strategy


def test_mutual_verification_members_between_every_two_models(ladder_labels):
    df, _ = ladder_labels
    pairs = {(m.rule["accept"], m.rule["escalate"], m.paid_stages) for m in baseline_members(df)
             if m.rule["name"] == "mutual-verification" and m.rule["keep_tokens"] == 16}
    assert pairs == {("mid_direct", "transfer_small_mid_16", ("small_direct", "mid_direct")),
                     ("large_direct", "transfer_16", ("small_direct", "large_direct")),
                     ("large_direct", "transfer_mid_large_16", ("mid_direct", "large_direct"))}


@pytest.fixture(scope="module")
def trained(ladder_labels, tmp_path_factory):
    df, meta = ladder_labels
    out = tmp_path_factory.mktemp("ladder")
    config = TrainConfig(output_dir=str(out), cv_folds=0, num_boost_round=40, no_mlflow=True)
    return train_router(config, df, meta)


def test_ladder_cascade_climbs_and_is_certified(trained):
    p = trained.router.policy
    assert p.format_version == 3 and p.ladder == list(LADDER) and p.mode == "cascade"
    assert p.paid_stages == ["small_direct", "mid_direct"]  # every direct answer below the top, cheapest first
    assert {s for f in p.features for s in f.split("__")[1].split("+")} <= {"prompt", "small_direct", "mid_direct"}
    cert = p.certificate
    assert cert["feasible"] and cert["reference"] == "large_reason"
    assert cert["delta_after_selection"] == cert["delta_each"] == 0.1  # one router: the level that holds is delta
    ev = trained.evaluation
    assert ev["target_met_test"] and ev["rows"][-1]["name"].startswith("chosen: ")


def test_evaluation_table_holds_every_row_the_ladder_needs(trained, ladder_labels):
    df, _ = ladder_labels
    ev, rows = trained.evaluation, trained.evaluation["rows"]
    singles = {r["name"] for r in rows if r["kind"] == "single"}
    assert singles == {c[len("correct__"):] for c in df if c.startswith("correct__")}
    assert [r["name"] for r in rows if r["kind"] == "oracle"] == ["oracle"]
    mv = {r["name"] for r in rows if r["kind"] == "baseline"}
    assert {"mutual verification K=16 small/mid", "mutual verification K=16 small/large",
            "mutual verification K=16 mid/large"} <= mv
    pairs = [r for r in rows if r["kind"] == "pair"]
    assert sorted(tuple(r["pair"]) for r in pairs) == [("mid", "large"), ("small", "large"), ("small", "mid")]
    for r in pairs:  # each trained on its own strategies only, certified against the same reference
        assert set(strategy_models(r["mix"])) <= set(r["pair"])
        assert r["certificate"]["reference"] == "large_reason"
    feasible = [r for r in pairs if r["feasible"]]
    v = ev["ladder_vs_pairs"]
    best = min(feasible, key=lambda r: r["mean_latency_ms"])
    assert v["best_pair"] == best["pair"] and v["ladder_mean_latency_ms"] == rows[-1]["mean_latency_ms"]
    assert v["latency_reduction"] == pytest.approx(1 - rows[-1]["mean_latency_ms"] / best["mean_latency_ms"])
    table = trained.table
    assert "best pair small/mid: " in table and "ladder vs its best pair (" in table


def test_saved_ladder_router_loads_and_climbs(trained):
    router = load_router(trained.output_dir / "router")
    assert router.policy.ladder == list(LADDER)
    assert next_action(router, {}, []).stage == "small_direct"
    assert next_action(router, {}, ["small_direct"]).stage == "mid_direct"
    row = trained.test.iloc[0].to_dict()
    step = next_action(router, row, ["small_direct", "mid_direct"])
    assert step.kind == "answer" and step.decision == router.decide(row)
    assert step.accept == (step.strategy in ("small_direct", "mid_direct"))


def test_one_shot_ladder_policy_pays_nothing(ladder_labels, tmp_path):
    df, meta = ladder_labels
    config = TrainConfig(output_dir=str(tmp_path), cv_folds=0, num_boost_round=20, no_mlflow=True, mode="one-shot",
                         no_pair_comparison=True)
    result = train_router(config, df, meta)
    p = result.router.policy
    assert p.mode == "one-shot" and p.paid_stages == [] and all(f.startswith("feat__prompt__") for f in p.features)
    assert not [r for r in result.evaluation["rows"] if r["kind"] == "pair"]
    assert "ladder_vs_pairs" not in result.evaluation
    assert next_action(result.router, result.test.iloc[0].to_dict(), []).kind == "answer"


def test_self_probe_on_a_ladder_pays_the_top_models_direct_pass(ladder_labels):
    from routedvlm.training.probe.self_probe import with_large_direct

    df, _ = ladder_labels
    assert with_large_direct(["small_direct", "mid_direct"], df) == ["small_direct", "mid_direct", "large_direct"]
    assert with_large_direct(["mid_direct", "large_direct"], df) == ["mid_direct", "large_direct"]
    assert with_large_direct([], df) == []  # one-shot: refused later by the trainer, nothing added here


def test_self_probe_router_asks_for_large_direct_on_a_climb(ladder_labels):
    import numpy as np

    from routedvlm.router import Policy
    from routedvlm.router.ladder import stages_to_pay
    from routedvlm.router.self_probe import SelfProbeRouter

    strategies = ["small_direct", "mid_direct", "large_direct"]
    policy = Policy(router_type="self-probe", strategies=strategies, ladder=list(LADDER), mode="cascade",
                    paid_stages=["small_direct", "mid_direct"], features=["feat__mid_direct__logprob_mean"],
                    fallback="large_direct", params={"hidden": {"layers": [1], "position": "all_mean", "size": 2}})
    head = {"weight": np.zeros((3, 3)), "bias": np.zeros(3), "mean": np.zeros(3), "std": np.ones(3)}
    router = SelfProbeRouter(policy, head)
    assert stages_to_pay(router) == ["small_direct", "mid_direct", "large_direct"]
    assert next_action(router, {}, ["small_direct", "mid_direct"]).stage == "large_direct"


def test_train_router_cli_prints_the_ladder_table_from_a_v2_labels_file(tmp_path, capsys):
    from routedvlm.data.labels.schema import read_labels
    from routedvlm.training.synthetic_ladder import write_ladder_labels
    from routedvlm.training.tracking import _metrics
    from routedvlm.training.train_cli import main

    path = write_ladder_labels(tmp_path / "ladder.parquet", n=600, seed=2)
    _, meta = read_labels(path)
    assert meta["schema_version"] == 2 and meta["ladder"] == list(LADDER)
    assert main(["--data", str(path), "--no-mlflow", "--output-dir", str(tmp_path / "out"), "--cv-folds", "0",
                 "--num-boost-round", "20"]) == 0
    out = capsys.readouterr().out
    assert "mutual verification K=16 mid/large" in out and "best pair small/large: " in out
    assert "ladder vs" in out and "\nchosen: " in out
    import json

    ev = json.loads((tmp_path / "out" / "evaluation.json").read_text())
    metrics = _metrics(ev)  # what MLflow logs: each sub-pair under a stable key
    assert {"pair_small_mid.mean_latency_ms", "pair_small_large.accuracy", "pair_mid_large.accuracy"} <= set(metrics)
