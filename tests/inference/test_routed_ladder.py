"""RoutedVLM over a list of models, cheapest first: the list form of from_pretrained (a list of two is the pair), its
errors, and a ladder of three on the shipped toy checkpoints (the large one used twice, as `mid` and `large`)."""
import pytest

from routedvlm.errors import ConfigError

Q = "How many boxes?"
PIPE_KW = dict(min_new_tokens=4, max_direct_tokens=6, max_reason_tokens=40, min_reason_tokens=24)


def test_a_list_of_two_is_the_pair_and_the_router_may_come_second(tiny_pair, make_pipeline, images):
    from routedvlm.inference.routed import RoutedVLM

    small, large = tiny_pair
    listed = RoutedVLM.from_pretrained([small, large], "transfer_8", **PIPE_KW)
    pair = RoutedVLM.from_pretrained(small, large, "transfer_8", **PIPE_KW)
    keyword = RoutedVLM.from_pretrained([small, large], router="transfer_8", **PIPE_KW)
    outs = [vlm(image=images["wide"], question=Q) for vlm in (listed, pair, keyword)]
    assert len({(o.strategy, o.text) for o in outs}) == 1 and outs[0].strategy == "transfer_8"
    assert outs[0].text == make_pipeline(small, large).run(images["wide"], Q, "transfer_8").answer
    assert outs[0].models == ["small", "large"] and outs[0].answer_model == "large"
    assert repr(listed).startswith(f"RoutedVLM(small={small.name!r}, large={large.name!r}, router=")


def test_model_lists_that_are_not_ladders_are_clear_errors(tiny_pair):
    from routedvlm.inference.routed import RoutedVLM
    from routedvlm.inference.sides import load_sides

    small, large = tiny_pair
    with pytest.raises(ConfigError, match=r"^RoutedVLM.from_pretrained takes a list of models and then the router"):
        RoutedVLM.from_pretrained([small, large], large, router="large_direct")
    with pytest.raises(ConfigError, match=r"^RoutedVLM.from_pretrained needs the models: `from_pretrained\(small, large, "
                                          r"router\)` or a list"):
        RoutedVLM.from_pretrained(small, router="large_direct")
    with pytest.raises(ConfigError, match=r"^A ladder of models must be a list of 2 to 10 models, cheapest first .* "
                                          r"Got a list of 1\."):
        RoutedVLM.from_pretrained([small], "large_direct")
    with pytest.raises(ConfigError, match=r"Got entries that are not models \(#1: None; #2: 3\)\.$"):
        load_sides([small, None, 3])
    with pytest.raises(ConfigError, match=r"^A ladder of models must be a list .* Got 'one/path'\.$"):
        load_sides("one/path")
