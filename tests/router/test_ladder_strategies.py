"""The ladder's strategy ids (DESIGN.md, "A ladder of N models"): the pair's ids keep their meaning."""
import pytest

from routedvlm.data.labels.schema import classify_column, escalate_col
from routedvlm.errors import UnknownStrategyError
from routedvlm.router.strategies import (default_strategies, feature_stages, ladder_aliases, ladder_strategies,
                                         parse_strategy, strategy_models, transfer_id)


def test_ladder_of_two_is_the_pair():
    assert ladder_aliases(2) == ("small", "large")
    assert ladder_strategies(ladder_aliases(2), (16, 64)) == default_strategies((16, 64))


def test_three_models_grid_and_order():
    ids = ladder_strategies(ladder_aliases(3), (32,))
    assert ids[:6] == ["small_direct", "mid_direct", "large_direct", "small_reason", "mid_reason", "large_reason"]
    assert set(ids[6:]) == {"transfer_small_mid_32", "transfer_small_mid_all", "transfer_32", "transfer_all",
                            "transfer_mid_large_32", "transfer_mid_large_all"}
    assert ids.index("transfer_small_mid_all") < ids.index("transfer_32")  # by target, then source, then K
    bounded = ladder_strategies(ladder_aliases(3), (32,), pairs=[("mid", "large")], reason=False, transfer_all=False)
    assert bounded == ["small_direct", "mid_direct", "large_direct", "transfer_mid_large_32"]
    assert ladder_aliases(5) == ("small", "mid1", "mid2", "mid3", "large")


def test_transfer_parsing_and_canonical_pair_spelling():
    s = parse_strategy("transfer_small_large_64")
    assert (s.id, s.keep_tokens, s.source, s.model) == ("transfer_64", 64, "small", "large")
    t = parse_strategy("transfer_mid_large_all")
    assert (t.keep_tokens, t.source, t.answerer, t.models) == (None, "mid", "large", ("mid", "large"))
    assert transfer_id(16, "small", "mid") == "transfer_small_mid_16"
    assert strategy_models(["mid_direct", "transfer_small_mid_16"]) == ("small", "mid")
    for bad in ("transfer_large_small_16", "transfer_mid_mid_16", "mid0_direct", "huge_direct", "transfer_small_mid_0"):
        with pytest.raises(UnknownStrategyError):
            parse_strategy(bad)


def test_escalate_columns_and_feature_stages():
    assert escalate_col("transfer_64") == "latency_ms__escalate_64"
    assert escalate_col("transfer_all") == "latency_ms__escalate_all"
    assert escalate_col("transfer_small_mid_16") == "latency_ms__escalate_small_mid_16"
    assert classify_column("latency_ms__escalate_small_mid_16") == ("escalate", "small_mid_16")
    assert classify_column("latency_ms__escalate_all") == ("escalate", "all")
    assert feature_stages("feat__mid_direct+large_direct__agree") == ("mid_direct", "large_direct")
    with pytest.raises(UnknownStrategyError):
        feature_stages("feat__mid_reason__x")
