"""Feature selection per mode, paid stages, and constant targets."""
import pytest

from routedvlm.errors import ConfigError
from routedvlm.training.fit import paid_stages_for, select_features


def test_feature_selection_follows_the_mode(synthetic_df):
    one = select_features(synthetic_df, "one-shot")
    assert one and all(f.startswith("feat__prompt__") for f in one) and paid_stages_for(one, "one-shot") == []
    cas = select_features(synthetic_df, "cascade")
    assert set(one) < set(cas) and not [f for f in cas if "small_direct" in f]
    assert paid_stages_for(cas, "cascade") == ["large_direct"]
    small = select_features(synthetic_df, "cascade", with_small_direct=True)
    assert "feat__large_direct+small_direct__agree" in small and "feat__small_direct__first_token_entropy" in small
    assert paid_stages_for(small, "cascade") == ["large_direct", "small_direct"]
    picked = select_features(synthetic_df, "cascade", ["small_direct", "feat__prompt__question_*"])
    assert picked == ["feat__prompt__question_words", "feat__small_direct__first_token_entropy",
                      "feat__small_direct__logprob_mean", "feat__large_direct+small_direct__agree"]
    with pytest.raises(ConfigError, match=r"^`--features` items \['feat__prompt__nope'\] match no feature column"):
        select_features(synthetic_df, "cascade", ["feat__prompt__nope"])


@pytest.mark.slow
def test_small_direct_features_and_a_constant_target(synthetic_df, tmp_path):
    from routedvlm.router.load import load_router
    from routedvlm.training.config import TrainConfig
    from routedvlm.training.pipeline import train_router

    df = synthetic_df.head(1200).copy()
    df["correct__small_direct"] = False  # never right: a constant P(correct) = 0 instead of a booster
    config = TrainConfig(output_dir=str(tmp_path), no_mlflow=True, features="prompt,large_direct,small_direct",
                         num_boost_round=30)
    res = train_router(config, df, {})
    p = res.router.policy
    assert p.paid_stages == ["large_direct", "small_direct"] and p.params["constants"] == {"small_direct": 0.0}
    assert p.expected_cost_ms["small_direct"] == 0.0  # already paid
    assert not (tmp_path / "router" / "model_small_direct.txt").exists()
    loaded = load_router(tmp_path / "router")
    d = loaded.decide(df.iloc[0].to_dict())
    assert d.p_correct["small_direct"] == 0.0 and d.strategy != "small_direct"


def test_infinite_feature_values_are_not_missing_values(synthetic_df):
    import numpy as np

    from routedvlm.errors import TrainingError
    from routedvlm.training.fit import check_features

    cols = ["feat__prompt__question_words", "feat__large_direct__logprob_mean"]
    df = synthetic_df.head(50).copy()
    df.loc[df.index[:3], cols[0]] = np.nan
    assert check_features(df, cols, allow_missing=True) == cols  # NaN: LightGBM's missing value
    df.loc[df.index[5:7], cols[1]] = -np.inf
    with pytest.raises(TrainingError, match=r"^Feature columns with infinite values \(rows affected, of 50\): "
                                            r"\{'feat__large_direct__logprob_mean': 2\}. Only NaN marks a missing value"):
        check_features(df, cols, allow_missing=True)


def _train_rows_constant_elsewhere_varied(df, config):
    """A copy of `df` whose `feat__prompt__question_words` is constant on the training split and varies on the
    calibration and test rows."""
    import numpy as np

    from routedvlm.training.split import split_labels

    split = split_labels(df, config.calib_fraction, config.test_fraction, config.seed)
    out = df.copy()
    out.loc[split.train.index, "feat__prompt__question_words"] = 7.0
    held = split.calibration.index.union(split.test.index)
    out.loc[held, "feat__prompt__question_words"] = np.arange(len(held), dtype=float)
    return out, held


def test_constant_features_are_found_on_the_training_rows_only(synthetic_df, caplog):
    """Issue 27's rule for every data-dependent choice: calibration and test rows cannot change the feature list."""
    import logging

    from routedvlm.errors import TrainingError
    from routedvlm.training.config import TrainConfig
    from routedvlm.training.steps import plan

    config = TrainConfig(no_mlflow=True)
    df, held = _train_rows_constant_elsewhere_varied(synthetic_df.head(600), config)
    with caplog.at_level(logging.WARNING, logger="routedvlm.training.fit"):
        _, features, _ = plan(config, df)
    assert "feat__prompt__question_words" not in features  # constant where the router learns, so dropped
    assert "['feat__prompt__question_words']" in caplog.text  # the warning names it
    other = features[0]
    changed = df.copy()
    changed.loc[held, "feat__prompt__question_words"] = 7.0  # now constant everywhere
    changed.loc[held, other] = 0.0  # constant on the held-out rows only
    assert plan(config, changed)[1] == features
    with pytest.raises(TrainingError, match=r"^Constant feature columns \['feat__prompt__question_words'\] \(on the "
                                            r"360 training rows\) carry no information, and --strict-features"):
        plan(TrainConfig(no_mlflow=True, strict_features=True), df)


@pytest.mark.slow
def test_a_pandas_copy_of_the_bundled_labels_trains(tmp_path, caplog):
    """Regression: a copy of the bundled labels written by pandas (its metadata dropped) was refused with
    "Constant feature columns [...]" while the original trained; now both drop those columns with a warning, and
    --strict-features refuses them."""
    import logging

    import pandas as pd

    from routedvlm.errors import TrainingError
    from routedvlm.training import train_cli
    from routedvlm.training.labels_io import embedded_labels_path

    copy = tmp_path / "copy.parquet"
    pd.read_parquet(embedded_labels_path()).to_parquet(copy)
    caplog.set_level(logging.WARNING, logger="routedvlm.training.fit")
    args = ["--data", str(copy), "--no-mlflow", "--num-boost-round", "20", "--output-dir", str(tmp_path / "run")]
    assert train_cli.main(args) == 0
    assert (tmp_path / "run" / "router" / "policy.json").is_file()
    dropped = [r.getMessage() for r in caplog.records if r.name == "routedvlm.training.fit" and "constant" in r.getMessage()]
    assert len(dropped) == 1 and "'feat__prompt__image_count'" in dropped[0]  # named: one image per toy sample
    with pytest.raises(TrainingError, match=r"^Constant feature columns \['feat__prompt__"):
        train_cli.main([*args, "--strict-features"])
