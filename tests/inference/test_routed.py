"""RoutedVLM: routes match the policy run by hand, escalation reuses the prefix, features equal the
labeller's, and a broken router never fails a request."""
import json
import logging

import pytest
from routed_helpers import PROMPT_FEATURE, every_feature_router, expected_route, save_prompt_router

from routedvlm.errors import ConfigError, InputError
from routedvlm.inference.routed import DEFAULT_ROUTER

Q = "How many boxes?"
PIPE_KW = dict(min_new_tokens=4, max_direct_tokens=6, max_reason_tokens=40, min_reason_tokens=24)


@pytest.fixture(scope="module")
def pipe(tiny_pair, make_pipeline):
    return make_pipeline(*tiny_pair)


@pytest.fixture(scope="module")
def routed(pipe):
    from routedvlm.inference.routed import RoutedVLM

    return lambda router, **kw: RoutedVLM(pipe, router, **kw)


def test_mutual_verification_route_equals_the_policy_run_by_hand(routed, pipe, images):
    from routedvlm.inference.mutual_verification import MutualVerification

    out = routed("mutual-verification:8")(image=images["square"], question=Q)
    ref = MutualVerification(pipe, keep_tokens=8).run(images["square"], Q)
    assert (out.strategy, out.text) == (ref.strategy, ref.answer)
    assert out.keep_tokens == (8 if out.strategy == "transfer_8" else None)
    d = out.decision
    assert d["router_type"] == "mutual-verification" and d["fallback"] is False and d["error"] is None
    assert set(d["features"]) == {"feat__large_direct+small_direct__agree"}
    json.dumps(out.to_dict())


def test_cascade_escalation_reuses_the_large_prefix(routed, pipe, images):
    out = routed(every_feature_router("transfer_8"))(image=images["wide"], question=Q)
    stages = [r["stage"] for r in out.trace]
    assert stages[:4] == ["large_prefix", "large_direct", "small_direct", "decision"]
    assert stages[-1] == "escalate" and stages.count("large_prefix") == 1
    esc = out.trace[-1]
    assert esc["vision_ms"] == 0 and esc["cached_tokens"] == out.trace[0]["prefill_tokens"] > 0
    assert out.text == pipe.run(images["wide"], Q, "transfer_8").answer


@pytest.mark.parametrize("strategy", ["small_direct", "large_reason", "transfer_8"])
def test_fixed_router_runs_only_its_strategy(routed, pipe, images, strategy):
    out = routed(strategy)(image=images["tall"], question=Q)
    ref = pipe.run(images["tall"], Q, strategy)
    assert (out.strategy, out.text) == (strategy, ref.answer)
    assert [r["stage"] for r in out.trace if r["stage"] != "decision"] == [r["stage"] for r in ref.trace]
    assert out.trace[0]["stage"] == "decision" and out.decision["mode"] == "one-shot"


def test_one_shot_lightgbm_router_routes_each_question_by_its_prompt_features(routed, images, tmp_path):
    from routedvlm.inference.features import compute_features
    from routedvlm.router import load_router

    folder = save_prompt_router(tmp_path / "router")
    vlm = routed(str(folder))
    questions = ["Color?", "How many red boxes are in this picture?", "Count the boxes, then say how many are blue and how many green."]
    outs = vlm.generate(image=[images["square"]] * 3, question=questions)
    assert [o.strategy for o in outs] == [expected_route(q) for q in questions] == ["small_direct", "large_direct", "transfer_8"]
    router = load_router(folder)
    for q, o in zip(questions, outs):
        feats = compute_features(q, [images["square"]], names=[PROMPT_FEATURE])
        assert o.decision["features"] == feats and o.p_correct == router.decide(feats).p_correct
        assert o.decision["mode"] == "one-shot" and o.trace[0]["stage"] == "decision"


def test_runtime_features_equal_compute_features_on_run_many(routed, pipe, images):
    """The runtime computes the features the labeller computes: `compute_features` on run_many's results."""
    from routedvlm.inference.features import compute_features, feature_names

    out = routed(every_feature_router())(image=images["square"], question=Q)
    shared = pipe.run_many(images["square"], Q, ["large_direct", "small_direct"])
    expected = compute_features(Q, [images["square"]], shared)
    got = out.decision["features"]
    assert list(got) == feature_names() and set(expected) == set(got)
    assert got == pytest.approx(expected, abs=1e-5)


def test_router_that_raises_falls_back_with_a_warning(routed, pipe, images, caplog):
    from routedvlm.inference.mutual_verification import MutualVerification

    with caplog.at_level(logging.WARNING, logger="routedvlm.inference.policy_runner"):
        out = routed(every_feature_router(fail=True), fallback="mutual-verification:8")(image=images["square"], question=Q)
    assert "failed at decision time" in caplog.text
    d = out.decision
    assert out.fallback and d["fallback"] and d["router_type"] == "mutual-verification"
    assert d["error"].startswith("RuntimeError: scoring exploded")
    ref = MutualVerification(pipe, keep_tokens=8).run(images["square"], Q)
    assert (out.strategy, out.text) == (ref.strategy, ref.answer)
    assert sum(r["stage"] == "large_direct" for r in out.trace) == 1  # stages already run are reused


@pytest.mark.parametrize("corruption", ["garbage", "missing_model", "no_folder"])
def test_router_that_fails_to_load_falls_back(routed, images, tmp_path, caplog, corruption):
    folder = save_prompt_router(tmp_path / "router")
    if corruption == "garbage":
        (folder / "policy.json").write_text("{not json")
    elif corruption == "missing_model":
        next(folder.glob("model_*.txt")).unlink()
    else:
        folder = tmp_path / "absent"
    with caplog.at_level(logging.WARNING, logger="routedvlm.inference.routed"):
        vlm = routed(str(folder), fallback="large_direct")
    assert vlm.router is None and vlm.router_error.startswith("RouterLoadError: ") and "failed to load" in caplog.text
    out = vlm(image=images["square"], question=Q)
    assert out.fallback and out.strategy == "large_direct" and out.decision["error"] == vlm.router_error


def test_bad_fallback_and_bad_input_are_clear_errors(routed, images):
    with pytest.raises(ConfigError, match=r"^The `fallback` parameter of RoutedVLM must be"):
        routed("large_direct", fallback="nope")
    vlm = routed("large_direct")
    with pytest.raises(InputError, match=r"^The `question` parameter must be a non-empty string"):
        vlm(image=images["square"], question="  ")
    with pytest.raises(InputError, match=r"^A batch needs one question per image: got 2 images and 1 questions"):
        vlm.generate(image=[images["square"]] * 2, question=[Q])


def test_messages_and_batches_of_messages(routed, pipe, images):
    vlm = routed("large_direct")
    msg = [{"role": "user", "content": [{"type": "image", "image": images["wide"]}, {"type": "text", "text": Q}]}]
    one = vlm.generate(messages=msg)
    both = vlm.generate(messages=[msg, msg])
    assert [o.text for o in both] == [one.text] * 2 == [pipe.run(images["wide"], Q, "large_direct").answer] * 2


def test_from_pretrained_loads_paths_and_splits_config_kwargs(tiny_dir, images):
    from routedvlm.inference.routed import RoutedVLM
    from routedvlm.inference.tiny import build_tiny_pair

    small, large = build_tiny_pair(tiny_dir / "routed-pair")
    vlm = RoutedVLM.from_pretrained(small, large, router="small_direct", **PIPE_KW)
    assert vlm.pipeline.config.max_direct_tokens == 6 and vlm.router.policy.router_type == "fixed"
    assert vlm(image=images["square"], question=Q).strategy == "small_direct"
    with pytest.raises(ConfigError, match=r"^Pass either `config` or PipelineConfig fields \['min_new_tokens'\]"):
        RoutedVLM.from_pretrained(small, large, router="small_direct", config=vlm.pipeline.config, min_new_tokens=1)


@pytest.mark.slow
def test_runtime_features_and_answers_equal_the_labellers_output(tiny_pair, tmp_path):
    """Same samples, same models and settings: labelled from a local JSONL with a custom prompt template, RoutedVLM
    given the user's raw questions applies the template the router carries, so the features it decides on and its
    answers are the labels' feature and answer columns."""
    from PIL import Image

    from routedvlm.data.labelling.cli import main as label
    from routedvlm.data.labels.schema import read_labels
    from routedvlm.inference import CollaborativePipeline
    from routedvlm.inference.features import feature_names
    from routedvlm.inference.routed import RoutedVLM

    rows = [{"id": "a", "question": "What color is the bar?", "answer": "red", "image": "a.png"},
            {"id": "b", "question": "Is the bar taller than 3? ", "answer": ["no"], "image": "b.png"}]
    Image.new("RGB", (64, 48), (200, 30, 30)).save(tmp_path / "a.png")
    Image.new("RGB", (64, 48), (20, 90, 200)).save(tmp_path / "b.png")
    (tmp_path / "qa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out, template = tmp_path / "labels.parquet", "Look closely. {question}\nOne word."
    small, large = (v.name for v in tiny_pair)
    assert label(["--small", small, "--large", large, "--dataset", str(tmp_path / "qa.jsonl"), "--out", str(out),
                  "--strategies", "small_direct,large_direct,transfer_4", "--k-grid", "4", "--max-new-tokens", "6",
                  "--min-new-tokens", "4", "--max-reason-tokens", "8", "--min-reason-tokens", "4", "--device", "cpu",
                  "--no-progress", "--prompt-template", template]) == 0
    df, meta = read_labels(out)
    table = df.set_index("sample_id")
    assert meta["prompt_template"] == {"name": "custom", "text": template, "instructions": None}
    assert table.loc["b", "question"] == "Look closely. Is the bar taller than 3? \nOne word."
    pipe = CollaborativePipeline(*tiny_pair, k_grid=(4,), max_direct_tokens=6, min_new_tokens=4, max_reason_tokens=8,
                                 min_reason_tokens=4)
    vlm = RoutedVLM(pipe, every_feature_router("transfer_4", prompt_template=meta["prompt_template"]))
    names = feature_names()
    for row in rows:
        labelled = table.loc[row["id"]]
        out_ = vlm(image=str(tmp_path / row["image"]), question=row["question"])
        assert out_.decision["features"] == pytest.approx({n: float(labelled[n]) for n in names}, abs=1e-5)
        assert out_.text == labelled["answer__transfer_4"]


def test_the_router_s_prompt_template_is_applied_to_every_question(routed, images, tmp_path):
    from routedvlm.inference.features import compute_features

    folder = save_prompt_router(tmp_path / "router", {"name": "custom", "text": "{question} Answer briefly.",
                                                      "instructions": None})
    out = routed(str(folder))(image=images["square"], question="Color?")
    assert out.decision["features"] == compute_features("Color? Answer briefly.", [images["square"]],
                                                        names=[PROMPT_FEATURE])
    assert routed(str(folder)).prompt_template.name == "custom"
    plain = routed(str(folder), prompt_template="none")(image=images["square"], question="Color?")
    assert plain.decision["features"] == {PROMPT_FEATURE: 6.0}  # an explicit template overrides the router's
    assert routed("large_direct").prompt_template.name == "none"  # rules and fixed strategies add nothing


@pytest.mark.slow
def test_default_router_is_the_champion_in_the_default_tracking_store(routed, images, tmp_path, monkeypatch, caplog):
    """No champion yet: the fallback answers with a warning; once a router is registered with alias champion in
    ./mlruns, RoutedVLM's default `models:/vlm-router@champion` loads it."""
    import mlflow
    from mlflow import MlflowClient

    from routedvlm.router import CHAMPION_ALIAS, DEFAULT_MODEL_NAME, log_router_model
    from routedvlm.router.tracking import get_or_create_experiment, resolve_tracking_uri

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with caplog.at_level(logging.WARNING, logger="routedvlm.inference.routed"):
        missing = routed("models:/vlm-router@champion")
    assert missing.router is None and "models:/vlm-router@champion" in caplog.text
    assert missing(image=images["square"], question=Q).fallback

    uri = resolve_tracking_uri()
    mlflow.set_experiment(experiment_id=get_or_create_experiment("routed-test", uri))
    log_router_model(save_prompt_router(tmp_path / "router"), registered_model_name=DEFAULT_MODEL_NAME)
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    client.set_registered_model_alias(DEFAULT_MODEL_NAME, CHAMPION_ALIAS, client.get_latest_versions(DEFAULT_MODEL_NAME)[0].version)
    vlm = routed(DEFAULT_ROUTER)
    assert vlm.router is not None and vlm.router.policy.router_type == "lightgbm"
    out = vlm(image=images["square"], question="Color?")
    assert (out.strategy, out.fallback) == ("small_direct", False)


@pytest.mark.parametrize("rule", ["mutual-verification", "binary"])
def test_a_learned_router_runs_its_certified_rule(routed, pipe, images, tmp_path, rule):
    """The rule in policy.json (not the tau-rule) decides at run time: mutual verification on a LightGBM router pays
    both direct stages and never scores the model; the binary rule reads P(large_direct) only."""
    from routedvlm.inference.mutual_verification import MutualVerification
    from routedvlm.router import load_router
    from routedvlm.router.decision_rules import binary_rule, mutual_verification_rule

    folder = save_prompt_router(tmp_path / "router")
    data = json.loads((folder / "policy.json").read_text())
    if rule == "mutual-verification":
        data.update(rule=mutual_verification_rule(8), mode="cascade", paid_stages=["large_direct", "small_direct"])
    else:
        data.update(rule=binary_rule(0.5, escalate="transfer_8"))
    (folder / "policy.json").write_text(json.dumps(data))
    out = routed(str(folder))(image=images["square"], question=Q)
    d = out.decision
    if rule == "mutual-verification":
        ref = MutualVerification(pipe, keep_tokens=8).run(images["square"], Q)
        assert (out.strategy, out.text) == (ref.strategy, ref.answer) and out.p_correct == {}
        assert d["reason"] in ("agree", "disagree") and set(d["features"]) == {"feat__large_direct+small_direct__agree"}
        assert [r["stage"] for r in out.trace][:4] == ["large_prefix", "large_direct", "small_direct", "decision"]
    else:
        want = load_router(folder).decide(d["features"])
        assert (out.strategy, d["reason"]) == (want.strategy, want.reason) and want.reason in ("p>=theta", "escalate")
        assert out.strategy == ("large_direct" if out.p_correct["large_direct"] >= 0.5 else "transfer_8")
