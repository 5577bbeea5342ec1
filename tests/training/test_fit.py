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
