"""Worked examples for the cost model, the split, the operating-point pick, the AUC and the config."""
import numpy as np
import pandas as pd
import pytest

from routedvlm.data.labels import check_labels
from routedvlm.router.errors import ConfigError, TrainingError
from routedvlm.training.calibrate import OperatingPoint, pick_operating_point
from routedvlm.training.config import TrainConfig
from routedvlm.training.costs import expected_costs, incremental_costs, realized_latency
from routedvlm.training.evaluate import area_under_curve, utility
from routedvlm.training.split import split_labels
from routedvlm.training.synthetic import capacity, make_synthetic_labels, synthetic_metadata


def _two_rows():
    return pd.DataFrame({
        "latency_ms__large_direct": [100.0, 200.0], "latency_ms__small_direct": [10.0, 20.0],
        "latency_ms__large_reason": [1000.0, 3000.0], "latency_ms__transfer_16": [300.0, 400.0],
        "latency_ms__escalate_16": [150.0, 250.0],
    })


def test_cost_model_worked_example():
    df, s = _two_rows(), ["small_direct", "large_direct", "large_reason", "transfer_16"]
    one = incremental_costs(df, s, "one-shot")
    assert one.iloc[0].tolist() == [10.0, 100.0, 1000.0, 300.0]
    cas = incremental_costs(df, s, "cascade", ["large_direct"])
    assert cas.iloc[1].tolist() == [20.0, 0.0, 3000.0, 250.0]
    both = incremental_costs(df, s, "cascade", ["large_direct", "small_direct"])
    assert both.iloc[0].tolist() == [0.0, 0.0, 1000.0, 150.0]
    # realized = paid + increment: row 0 accepts large_direct (100), row 1 escalates (200 + 250)
    assert realized_latency(df, ["large_direct", "transfer_16"], "cascade", ["large_direct"]).tolist() == [100.0, 450.0]
    assert realized_latency(df, ["large_direct", "transfer_16"], "cascade", ["large_direct", "small_direct"]).tolist() == [110.0, 470.0]
    assert expected_costs(df, ["transfer_16"], "cascade", ["large_direct"]) == {"transfer_16": 200.0}
    with pytest.raises(ConfigError, match=r"^A one-shot policy pays no stage"):
        incremental_costs(df, s, "one-shot", ["large_direct"])


def test_pick_operating_point_worked_example():
    pts = pd.DataFrame({"param": [0.1, 0.5, 0.9, 1.0], "accuracy": [0.70, 0.90, 0.95, 0.96],
                        "mean_latency_ms": [100.0, 300.0, 900.0, 1000.0]})
    # accuracy target 0.95 of a best single accuracy 0.96 -> required 0.912 -> tau 0.9 (cheapest meeting it)
    op = pick_operating_point(pts, {"kind": "accuracy", "value": 0.95}, 0.96)
    assert op == OperatingPoint(0.9, 0.95, 900.0, pytest.approx(0.912), True)
    # latency budget 500 ms -> the most accurate within it
    assert pick_operating_point(pts, {"kind": "latency_ms", "value": 500}, 0.96).param == 0.5
    # unreachable targets -> closest point, met=False
    assert pick_operating_point(pts, {"kind": "accuracy", "value": 1.0}, 0.99).param == 1.0
    assert not pick_operating_point(pts, {"kind": "latency_ms", "value": 50}, 0.96).met


def test_pick_operating_point_margin_worked_example():
    pts = pd.DataFrame({"param": [0.0, 0.5, 1.0], "accuracy": [0.90, 0.93, 0.98],
                        "mean_latency_ms": [100.0, 300.0, 1000.0]})
    target = {"kind": "accuracy", "value": 0.95}  # of a best single accuracy 0.96 -> required 0.912
    # margin 0 (the old rule): the cheapest tau whose accuracy >= 0.912 is 0.5 (0.93)
    assert pick_operating_point(pts, target, 0.96, margin=0.0).param == 0.5
    # margin 1 on 100 rows: 0.93 - sqrt(.93*.07/100) = 0.93 - 0.0255 = 0.9045 < 0.912; 0.98 - 0.014 = 0.966 -> tau 1.0
    op = pick_operating_point(pts, target, 0.96, margin=1.0, n=100)
    assert (op.param, op.met, op.margin, op.n) == (1.0, True, 1.0, 100)
    assert op.to_dict()["accuracy_lower_bound"] == pytest.approx(0.98 - 0.014)
    # the same margin on 400 rows: 0.93 - 0.01276 = 0.9172 >= 0.912 -> tau 0.5 again
    assert pick_operating_point(pts, target, 0.96, margin=1.0, n=400).param == 0.5
    # a latency budget ignores the margin
    assert pick_operating_point(pts, {"kind": "latency_ms", "value": 500}, 0.96, margin=1.0, n=100).param == 0.5


def test_pick_operating_point_margin_errors():
    pts = pd.DataFrame({"param": [0.0], "accuracy": [0.9], "mean_latency_ms": [100.0]})
    with pytest.raises(ConfigError, match=r"^`calibration_margin` must be a finite number >= 0"):
        pick_operating_point(pts, {"kind": "accuracy", "value": 0.9}, 0.9, margin=-1.0, n=10)
    with pytest.raises(ConfigError, match=r"^a calibration margin of 1.0 standard errors needs"):
        pick_operating_point(pts, {"kind": "accuracy", "value": 0.9}, 0.9, margin=1.0)
    with pytest.raises(ConfigError, match=r"^Invalid train-router configuration: `calibration_margin` must be"):
        TrainConfig(calibration_margin=-0.5)


def test_area_under_curve_worked_example():
    # best accuracy within latency: 0 on [0,100), 0.5 on [100,300), 1.0 on [300,400] -> (0.5*200 + 1*100) / 400
    pts = pd.DataFrame({"mean_latency_ms": [300.0, 100.0, 200.0], "accuracy": [1.0, 0.5, 0.4]})
    assert area_under_curve(pts, 0.0, 400.0) == pytest.approx(0.5)
    row = {"accuracy": 0.9, "mean_latency_ms": 250.0, "speedup_vs_large_reason": 4.0}
    assert utility(row, {"kind": "accuracy", "value": 0.9}, 0.95) == 4.0
    assert utility(row, {"kind": "accuracy", "value": 1.0}, 0.95) == pytest.approx(-0.05)
    # within one standard error of the required accuracy (0.95: sqrt(.95*.05/100) = 0.022) counts as met
    assert utility({**row, "accuracy": 0.93}, {"kind": "accuracy", "value": 1.0}, 0.95, n_test=100) == 4.0
    assert utility(row, {"kind": "latency_ms", "value": 200}, 0.95) == pytest.approx(-0.25)


def test_split_is_deterministic_stratified_and_disjoint(synthetic_df):
    a = split_labels(synthetic_df, seed=3)
    b = split_labels(synthetic_df.sample(frac=1.0, random_state=1), seed=3)  # row order must not matter
    for part in ("train", "calibration", "test"):
        assert sorted(getattr(a, part)["sample_id"]) == sorted(getattr(b, part)["sample_id"])
    ids = [set(p["sample_id"]) for p in (a.train, a.calibration, a.test)]
    assert not (ids[0] & ids[1]) and not (ids[0] & ids[2]) and not (ids[1] & ids[2])
    share = a.test["dataset"].value_counts(normalize=True)
    assert share.sub(synthetic_df["dataset"].value_counts(normalize=True)).abs().max() < 0.02
    with pytest.raises(TrainingError, match=r"^The labels have 50 usable row\(s\); train-router needs at least 80"):
        split_labels(synthetic_df.head(50))


def test_config_validation():
    assert TrainConfig().target == {"kind": "accuracy", "value": 0.98}
    assert TrainConfig(max_latency_ms=500).target == {"kind": "latency_ms", "value": 500.0}
    assert TrainConfig(strategies="large_direct, transfer_64").strategies == ["large_direct", "transfer_64"]
    with pytest.raises(ConfigError, match=r"give exactly one of `target_accuracy` and `max_latency_ms`"):
        TrainConfig(target_accuracy=0.9, max_latency_ms=100)
    with pytest.raises(ConfigError, match=r"`mode` must be 'cascade' or 'one-shot'; got 'two-shot'"):
        TrainConfig(mode="two-shot")
    with pytest.raises(ConfigError, match=r"`target_accuracy` must be in \(0, 1\]; got 1.5"):
        TrainConfig(target_accuracy=1.5)
    with pytest.raises(ConfigError, match=r"`strategies` must name at least two different strategies"):
        TrainConfig(strategies="large_direct")


def test_synthetic_labels_follow_the_schema_and_the_documented_process(synthetic_df):
    from routedvlm.data.labels import content_hash

    check_labels(synthetic_df, {**synthetic_metadata(synthetic_df, 0), "schema_version": 1,
                                "content_hash": content_hash(synthetic_df)})
    df = synthetic_df
    # capacities grow with K, and transfer accuracy follows them
    accs = [df[f"correct__transfer_{k}"].mean() for k in (16, 32, 64, 128, 256)]
    assert accs == sorted(accs) and capacity("transfer_16") < capacity("transfer_256")
    # large_direct is right on easy lookup samples (high confidence) and wrong on hard ones
    conf = df["feat__large_direct__logprob_mean"]
    assert df.loc[conf > conf.quantile(0.8), "correct__large_direct"].mean() > 0.95
    assert df.loc[conf < conf.quantile(0.2), "correct__large_direct"].mean() < 0.1
    # escalation after large_direct is cheaper than the one-stage transfer (the cached prefix)
    assert (df["latency_ms__escalate_64"] < df["latency_ms__transfer_64"]).all()
    assert np.isfinite(df.filter(like="feat__").to_numpy()).all()


def test_prompt_template_of_the_labels(caplog):
    """The router carries the labels' template; labels routedvlm wrote before templates were recorded used lmms-eval
    post prompts with their adapter's instruction (none for the toy world); other writers' labels: None, warned."""
    import logging

    from routedvlm.training.pipeline import prompt_template_of

    custom = {"name": "custom", "text": "{question}?", "instructions": None}
    assert prompt_template_of({"prompt_template": custom}) == custom
    chart = prompt_template_of({"sample_source": {"dataset": "lmms-lab/ChartQA", "adapter": "chartqa"}})
    assert chart["name"] == "lmms-eval" and chart["instructions"]["open"].startswith("Answer the question using")
    assert prompt_template_of({"sample_source": {"dataset": "x.parquet", "adapter": "toyworld"}})["name"] == "none"
    with caplog.at_level(logging.WARNING, logger="routedvlm.training.pipeline"):
        assert prompt_template_of({}) is None
    assert "records no prompt_template" in caplog.text
