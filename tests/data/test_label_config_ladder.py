"""A labelling run reads its models from one `Ladder` however the flags named them (a pair is a ladder of two), while
the settings it records keep the flags' form: a pair's labels metadata and --resume checks stay the two-model ones."""
import pytest

from routedvlm.data.labelling.config import LabelConfig
from routedvlm.data.labelling.ladder import Ladder
from routedvlm.errors import ConfigError

KW = dict(dataset="d.parquet", out="o.parquet")


def test_a_pair_and_a_two_model_ladder_are_one_ladder_and_record_the_pair():
    pair = LabelConfig(small="a", large="b", small_reasoner="r", cost_model_large="L", **KW)
    two = LabelConfig(models=("a", "b"), reasoners=("small=r",), cost_models=("large=L",), **KW)
    assert pair.ladder == two.ladder == Ladder({"small": "a", "large": "b"}, {"small": "r"}, {"large": "L"})
    assert not pair.is_ladder and pair.aliases == ("small", "large")
    recorded = two.settings()
    assert recorded == pair.settings()
    assert (recorded["small"], recorded["large"], recorded["small_reasoner"], recorded["cost_model_large"]) == (
        "a", "b", "r", "L")
    assert not {"models", "reasoners", "cost_models"} & set(recorded)  # the pair's metadata has no ladder keys


def test_a_ladder_merges_the_end_flags_with_the_alias_items_and_records_both_as_given():
    cfg = LabelConfig(models=("a", "m", "b"), small_reasoner="r", reasoners=("mid=q",),
                      cost_models=("mid=M", "small=S"), **KW)
    assert cfg.is_ladder and cfg.aliases == ("small", "mid", "large")
    assert cfg.ladder_specs() == {"small": "a", "mid": "m", "large": "b"}
    assert cfg.ladder_reasoners() == {"small": "r", "mid": "q"}
    assert cfg.ladder_cost_models() == {"small": "S", "mid": "M"}
    recorded = cfg.settings()
    assert (recorded["models"], recorded["reasoners"], recorded["small_reasoner"], recorded["cost_models"]) == (
        ["a", "m", "b"], ["mid=q"], "r", ["mid=M", "small=S"])
    assert (recorded["small"], recorded["large"]) == ("a", "b")  # the ends, as the pair fields have always said


def test_a_reasoner_given_twice_is_refused_for_a_pair_and_a_ladder():
    with pytest.raises(ConfigError, match=r"^The reasoner of 'small' is given twice; pass it once\.$"):
        LabelConfig(small="a", large="b", small_reasoner="r", reasoners=("small=s",), **KW)
    with pytest.raises(ConfigError, match=r"^The reasoner of 'small' is given twice \(--small-reasoner and --reasoner"):
        LabelConfig(models=("a", "m", "b"), small_reasoner="r", reasoners=("small=s",), **KW)
