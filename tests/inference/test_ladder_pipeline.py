"""The pipeline over a ladder of N >= 2 models: every ladder strategy id runs alone and shared in run_many with the
same answers, traces name the model aliases, escalation continues any model above the cheapest, and the pair's
behaviour is the two-model case of the same code."""
import threading

import pytest
from ladder_helpers import LadderWordSide

from routedvlm.errors import ConfigError, InputError
from routedvlm.router.strategies import ladder_strategies

Q = "How many boxes?"


@pytest.fixture()
def words():
    from routedvlm.inference import CollaborativePipeline

    sides = [LadderWordSide("s"), LadderWordSide("m"), LadderWordSide("l")]
    return CollaborativePipeline.from_ladder(sides, k_grid=[4, 8], max_reason_tokens=10)


def test_a_ladder_names_its_sides_by_position(words):
    assert words.aliases == ("small", "mid", "large")
    assert [s.name for s in words.sides.values()] == ["s", "m", "l"]
    assert words.small.name == "s" and words.large.name == "l"
    assert words.default_strategies() == ladder_strategies(("small", "mid", "large"), (4, 8))


def test_every_ladder_strategy_answers_from_the_right_models(words):
    """A transfer of K kept words answers K from its target model; directs answer 0; reasoning answers all 10."""
    ids = words.default_strategies()
    alone = {s: words.run(None, Q, s) for s in ids}
    expected = {"small_direct": "s:0", "mid_direct": "m:0", "large_direct": "l:0",
                "small_reason": "s:10", "mid_reason": "m:10", "large_reason": "l:10",
                "transfer_small_mid_4": "m:4", "transfer_small_mid_8": "m:8", "transfer_small_mid_all": "m:10",
                "transfer_mid_large_4": "l:4", "transfer_mid_large_8": "l:8", "transfer_mid_large_all": "l:10",
                "transfer_4": "l:4", "transfer_8": "l:8", "transfer_all": "l:10"}
    assert {s: r.answer for s, r in alone.items()} == expected
    many = words.run_many(None, Q, ids)
    assert list(many) == ids
    assert {s: r.answer for s, r in many.items()} == expected
    for sid in ids:
        assert many[sid].strategy == sid == alone[sid].strategy


def test_traces_name_the_models_that_ran(words):
    res = words.run(None, Q, "transfer_small_mid_4")
    assert [(r["model"], r["stage"]) for r in res.trace] == [("small", "small_reason"), ("mid", "mid_transfer")]
    many = words.run_many(None, Q, ["mid_direct", "transfer_mid_large_8"])
    assert [(r["model"], r["stage"]) for r in many["mid_direct"].trace] == [("mid", "mid_prefix"), ("mid", "mid_direct")]
    assert {r["model"] for r in many["transfer_mid_large_8"].trace} == {"mid", "large"}
    assert many["transfer_mid_large_8"].trace[-1]["stage"] == "large_transfer"


def test_run_many_runs_each_model_once_per_role(words):
    """mid reasons once for both of its transfers and its own mid_reason; large answers every transfer from one prefix."""
    mid = words.sides["mid"]
    mid.calls.clear()
    words.run_many(None, Q, ["mid_reason", "transfer_mid_large_4", "transfer_mid_large_all", "transfer_small_mid_8"])
    assert [c for c in mid.calls if c[1] == "mid_reason"] == [("mid", "mid_reason")]


def test_escalate_continues_any_model_above_the_cheapest(words):
    first = words.run(None, Q, "mid_direct")
    two = words.escalate(first, 8)
    assert two.answer == "m:8" and two.strategy == "transfer_small_mid_8" and two.trace[-1]["stage"] == "escalate"
    top = words.run(None, Q, "large_direct")
    from_mid = words.escalate(top, 4, source="mid")
    assert from_mid.answer == "l:4" and from_mid.strategy == "transfer_mid_large_4"
    reuse = words.escalate(top, None, reasoning=words.run(None, Q, "mid_reason"))
    assert reuse.strategy == "transfer_mid_large_all" and reuse.answer == "l:10"
    with pytest.raises(InputError, match=r"^escalate continues 'mid' with the reasoning of a cheaper model"):
        words.escalate(first, 4, source="large")
    with pytest.raises(InputError, match=r"^escalate needs a 'large_direct' Result \(or another '<model>_direct'"):
        words.escalate(words.run(None, Q, "small_direct"), 4)


def test_the_final_answer_call_is_the_answering_models(words):
    from routedvlm.inference.final_answer import answer_side

    for sid, alias in (("mid_direct", "mid"), ("transfer_small_mid_4", "mid"), ("transfer_mid_large_4", "large"),
                       ("small_direct", "small")):
        side, kind = answer_side(words, words.run(None, Q, sid))
        assert side is words.sides[alias] and kind == "direct", sid
    assert answer_side(words, words.run(None, Q, "mid_reason"))[0] is words.sides["mid"]


def test_strategies_of_models_not_on_the_ladder_are_refused():
    from routedvlm.inference import CollaborativePipeline

    pair = CollaborativePipeline(LadderWordSide("s"), LadderWordSide("l"))
    with pytest.raises(InputError, match=r"^Strategy 'mid_direct' runs model\(s\) \['mid'\], which this pipeline"):
        pair.run(None, Q, "mid_direct")
    with pytest.raises(InputError, match=r"^Strategy 'transfer_small_mid1_4' runs model\(s\) \['mid1'\]"):
        pair.run_many(None, Q, ["small_direct", "transfer_small_mid1_4"])


@pytest.mark.parametrize("kwargs, message", [
    ({"sides": [LadderWordSide("s")]}, r"^The `sides` parameter of CollaborativePipeline must list 2 to 10"),
    ({"small": LadderWordSide("s")}, r"^CollaborativePipeline needs a small and a large side, or `sides=\[...\]`"),
    ({"small": LadderWordSide("s"), "sides": [LadderWordSide("a"), LadderWordSide("b")]}, r"^Pass either `small`"),
])
def test_bad_ladders_are_refused(kwargs, message):
    from routedvlm.inference import CollaborativePipeline

    with pytest.raises(ConfigError, match=message):
        CollaborativePipeline(**kwargs)


def test_four_models_are_small_mid1_mid2_large():
    from routedvlm.inference import CollaborativePipeline

    pipe = CollaborativePipeline(sides=[LadderWordSide(n) for n in "abcd"], k_grid=[2], max_reason_tokens=6)
    assert pipe.aliases == ("small", "mid1", "mid2", "large")
    many = pipe.run_many(None, Q, ["mid1_direct", "transfer_mid1_mid2_2", "transfer_small_large_all"])
    assert {s: r.answer for s, r in many.items()} == {"mid1_direct": "b:0", "transfer_mid1_mid2_2": "c:2",
                                                      "transfer_all": "d:6"}


def test_stage_one_runs_one_thread_per_device():
    """Sides on two devices: the jobs of one device run in order in one thread, the devices in parallel."""
    from routedvlm.inference.pipeline_parts import parallel_sides

    sides = {"small": LadderWordSide("s", device="cpu"), "mid": LadderWordSide("m", device="cpu"),
             "large": LadderWordSide("l", device="cuda:0")}
    barrier = threading.Barrier(2, timeout=10)  # passes only if the two devices' jobs run at the same time
    order = []

    def job(name, wait):
        def run():
            if wait:
                barrier.wait()
            order.append(name)
            return threading.current_thread().name
        return run

    done = parallel_sides({"a": ("small", job("a", True)), "b": ("mid", job("b", False)),
                           "c": ("large", job("c", True))}, sides, True)
    assert done["a"] == done["b"] != done["c"]
    assert order.index("a") < order.index("b")
    assert set(parallel_sides({"a": ("small", lambda: threading.current_thread().name)}, sides, True).values()) == {
        threading.current_thread().name}


# ----- tiny transformers models: the shared run equals independent runs on a ladder -----------------------------------
def test_tiny_ladder_run_many_equals_run(tiny_pair, images):
    """small, large, large as a three-model ladder of real tiny VLMs: every ladder strategy's answer and tokens from
    run_many equal an independent run, and each trace's records name the models the strategy runs."""
    from routedvlm.inference import CollaborativePipeline

    small, large = tiny_pair
    pipe = CollaborativePipeline(sides=[small, large, large], k_grid=[4, 8], min_new_tokens=4, max_direct_tokens=6,
                                 max_reason_tokens=24, min_reason_tokens=12)
    ids = pipe.default_strategies()
    many = pipe.run_many(images["square"], Q, ids)
    for sid in ids:
        alone = pipe.run(images["square"], Q, sid)
        assert many[sid].answer == alone.answer and many[sid].generation.token_ids == alone.generation.token_ids, sid
        models = {r["model"] for r in many[sid].trace}
        from routedvlm.router.strategies import parse_strategy

        assert models == set(parse_strategy(sid).models), sid
    escalated = pipe.escalate(many["mid_direct"], 8)
    assert escalated.answer == many["transfer_small_mid_8"].answer
