"""RoutedVLM over a list of models, cheapest first: the list form of from_pretrained (a list of two is the pair), its
errors, and a ladder of three on the shipped toy checkpoints (the large one used twice, as `mid` and `large`)."""
from pathlib import Path

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


# ---- a ladder of three on the shipped toy checkpoints: the large one serves as `mid` too, so every `mid` answer must
# equal the large model's answer of the pair (a hand-checkable oracle for the runtime, whatever the toy world ships) ----
TOY = Path(__file__).resolve().parents[2] / "data" / "toyworld" / "checkpoints"
TOY_KW = dict(max_direct_tokens=8, max_reason_tokens=48, device="cpu")
TOY_Q = "How many red boxes are there?"


@pytest.fixture(scope="module")
def toy_ladder():
    from routedvlm.inference.routed import RoutedVLM

    return RoutedVLM.from_pretrained([TOY / "small", TOY / "large", TOY / "large"], "mid_direct", **TOY_KW)


@pytest.fixture(scope="module")
def toy_pair(toy_ladder):
    from routedvlm.inference import CollaborativePipeline

    pipe = toy_ladder.pipeline
    return CollaborativePipeline(pipe.sides["small"], pipe.sides["large"], config=pipe.config)


def _with(ladder, router):
    from routedvlm.inference.routed import RoutedVLM

    return RoutedVLM(ladder.pipeline, router)


def test_a_ladder_of_three_runs_the_mid_model_and_names_it(toy_ladder, toy_pair, images):
    assert toy_ladder.pipeline.aliases == ("small", "mid", "large")
    assert repr(toy_ladder).startswith("RoutedVLM(small=")
    assert ", mid=" in repr(toy_ladder)
    out = toy_ladder(image=images["square"], question=TOY_Q)
    assert out.strategy == "mid_direct" and out.models == ["mid"] and out.answer_model == "mid"
    assert {r["model"] for r in out.trace if r["stage"] != "decision"} == {"mid"}
    assert out.text == toy_pair.run(images["square"], TOY_Q, "large_direct").answer
    assert out.to_dict()["models"] == ["mid"]


@pytest.mark.parametrize("strategy, models, same_as", [
    ("transfer_small_mid_8", ["small", "mid"], "transfer_8"),
    ("mid_reason", ["mid"], "large_reason"),
    ("transfer_8", ["small", "large"], "transfer_8"),
])
def test_ladder_strategies_run_the_models_they_name(toy_ladder, toy_pair, images, strategy, models, same_as):
    out = _with(toy_ladder, strategy)(image=images["wide"], question=TOY_Q)
    assert out.strategy == strategy and out.models == models and out.answer_model == models[-1]
    assert out.text == toy_pair.run(images["wide"], TOY_Q, same_as).answer


def _ladder_cascade(strategy):
    """A cascade router of the ladder (policy.json format 3): pays small_direct and mid_direct (its agreement
    feature), then picks `strategy`."""
    import numpy as np
    import pandas as pd

    from routedvlm.router import Policy, Router

    class Climb(Router):
        def predict_proba(self, features):
            return pd.DataFrame({strategy: np.ones(len(features))}, index=features.index)

    policy = Policy(router_type="test-ladder-cascade", ladder=["small", "mid", "large"], mode="cascade",
                    strategies=[strategy], paid_stages=["small_direct", "mid_direct"],
                    features=["feat__mid_direct+small_direct__agree"], fallback=strategy)
    return Climb(policy)


def test_a_ladder_cascade_pays_its_direct_stages_cheapest_first_then_escalates(toy_ladder, toy_pair, images):
    out = _with(toy_ladder, _ladder_cascade("transfer_small_mid_8"))(image=images["tall"], question=TOY_Q)
    stages = [(r["stage"], r["model"]) for r in out.trace]
    assert stages[:4] == [("small_direct", "small"), ("mid_prefix", "mid"), ("mid_direct", "mid"), ("decision", None)]
    assert stages[-1] == ("escalate", "mid") and [s for s, _ in stages].count("mid_prefix") == 1
    assert out.trace[-1]["vision_ms"] == 0 and out.trace[-1]["cached_tokens"] > 0  # mid continued its paid prefix
    assert set(out.decision["features"]) == {"feat__mid_direct+small_direct__agree"}
    assert out.models == ["small", "mid"] and out.answer_model == "mid"
    assert out.text == toy_pair.run(images["tall"], TOY_Q, "transfer_8").answer


def test_a_ladder_cascade_accepts_a_paid_answer_without_running_more(toy_ladder, toy_pair, images):
    out = _with(toy_ladder, _ladder_cascade("mid_direct"))(image=images["square"], question=TOY_Q)
    assert [r["stage"] for r in out.trace] == ["small_direct", "mid_prefix", "mid_direct", "decision"]
    assert out.models == ["small", "mid"] and out.text == toy_pair.run(images["square"], TOY_Q, "large_direct").answer


def test_a_router_of_models_the_ladder_lacks_falls_back_and_health_names_the_models(tiny_pair, make_pipeline, images):
    from routedvlm.inference.routed import RoutedVLM

    pair = make_pipeline(*tiny_pair)
    vlm = RoutedVLM(pair, "transfer_small_mid_8", fallback="large_direct")
    assert vlm.router is None and vlm.router_error == (
        "ConfigError: The router runs model(s) ['mid'] of the ladder ['small', 'mid', 'large'], but this RoutedVLM's "
        "models are ['small', 'large']. Load it with 3 models, cheapest first, or use a router of this ladder.")
    out = vlm(image=images["square"], question=Q)
    assert out.fallback and out.strategy == "large_direct" and out.models == ["large"]
    assert vlm.health()["models"] == {"small": tiny_pair[0].name, "large": tiny_pair[1].name}
    with pytest.raises(ConfigError, match=r"^The `fallback` parameter of RoutedVLM must run on this RoutedVLM's models: "
                                          r"The router runs model\(s\) \['mid'\]"):
        RoutedVLM(pair, "large_direct", fallback="mid_direct")


@pytest.fixture(scope="module")
def trained_ladder_router(tmp_path_factory):
    """A LightGBM router trained and certified by train-router on synthetic labels of a three-model ladder."""
    from routedvlm.training.synthetic_ladder import write_ladder_labels
    from routedvlm.training.train_cli import main

    root = tmp_path_factory.mktemp("ladder-router")
    labels = write_ladder_labels(root / "ladder.parquet", n=600, seed=2)
    assert main(["--data", str(labels), "--no-mlflow", "--output-dir", str(root / "out"), "--cv-folds", "0",
                 "--num-boost-round", "20", "--no-pair-comparison"]) == 0
    return root / "out" / "router"


@pytest.mark.slow
def test_a_router_train_router_made_for_the_ladder_climbs_it_in_routed_vlm(toy_ladder, trained_ladder_router, images):
    from routedvlm.router.strategies import parse_strategy

    vlm = _with(toy_ladder, str(trained_ladder_router))
    policy = vlm.router.policy
    assert vlm.router_error is None and policy.ladder == ["small", "mid", "large"] and policy.mode == "cascade"
    for name, question in [("square", TOY_Q), ("wide", "Is there a blue box?"), ("tall", "How many boxes?")]:
        out = vlm(image=images[name], question=question)
        before = out.trace[: [r["stage"] for r in out.trace].index("decision")]
        assert not out.fallback and [r["stage"] for r in before if r["stage"].endswith("_direct")] == policy.paid_stages
        assert set(out.decision["features"]) == set(policy.decision_features)
        paid = {s[: -len("_direct")] for s in policy.paid_stages}
        runs = paid | set(parse_strategy(out.strategy).models)
        assert out.models == [m for m in ("small", "mid", "large") if m in runs]
        assert out.text == toy_ladder.pipeline.run(images[name], question, out.strategy).answer
