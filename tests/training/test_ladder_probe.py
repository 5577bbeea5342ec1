"""train-router --router lora-probe on a three-model ladder, end to end on the shipped toy checkpoints: the real
labeller writes ladder labels (schema 2, a bounded grid), the probe trains on them through the CLI, its policy.json
is format 3 with the ladder, and RoutedVLM over [small, mid, large] routes a request with it."""
import json
from pathlib import Path

import pytest

from routedvlm.data.toyworld.make_labels import MAX_DIRECT_TOKENS, MAX_REASON_TOKENS

TOY = Path(__file__).resolve().parents[2] / "data" / "toyworld" / "checkpoints"
LADDER = ["small", "mid", "large"]
STRATEGIES = ["small_direct", "mid_direct", "large_direct", "transfer_small_mid_8", "transfer_small_mid_all"]
N = 80  # the fewest rows train-router takes (train 40, calibration 20, test 20)


@pytest.fixture(scope="module")
def ladder_labels(tmp_path_factory):
    """N toy `label` samples labelled by the ladder on a bounded grid (one transfer pair, K=8 and all, no reasoning
    answers), through the labeller's Python API."""
    import torch

    from routedvlm.data.labelling.config import LabelConfig
    from routedvlm.data.labelling.job import run_labelling
    from routedvlm.data.toyworld.make_labels import write_split

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("ladder-probe")
    dataset = write_split("label", N, 0, root / "data")
    out = root / "labels.parquet"
    cfg = LabelConfig(models=tuple(str(TOY / m) for m in LADDER), dataset=str(dataset), out=str(out),
                      adapter="toyworld", k_grid=(8,), selector="prefix", device="cpu", transfer_pairs="small:mid",
                      reason_models="none", max_new_tokens=MAX_DIRECT_TOKENS, max_reason_tokens=MAX_REASON_TOKENS,
                      progress=False)
    run_labelling(cfg)
    return out


@pytest.fixture(scope="module")
def trained(ladder_labels, tmp_path_factory):
    from routedvlm.training.train_cli import main

    out = tmp_path_factory.mktemp("ladder-probe-run")
    # 20 calibration rows certify an absolute 0.5 accuracy target, not a relative one
    assert main(["--router", "lora-probe", "--data", str(ladder_labels), "--output-dir", str(out), "--no-mlflow",
                 "--epochs", "1", "--lora-r", "4", "--lr", "3e-3", "--batch-size", "4", "--num-boost-round", "10",
                 "--cv-folds", "0", "--calib-fraction", "0.25", "--test-fraction", "0.25", "--min-accuracy", "0.5"]) == 0
    return out


def test_the_labels_are_a_ladder_of_the_bounded_grid(ladder_labels):
    from routedvlm.data.labels.schema import read_labels

    df, meta = read_labels(ladder_labels)
    assert meta["schema_version"] == 2 and meta["ladder"] == LADDER and meta["strategies"] == STRATEGIES
    assert df["error"].isna().sum() == N


def test_the_probe_saves_a_format_3_policy_with_the_ladder(trained):
    from routedvlm.router import load_router
    from routedvlm.router.lora_probe import LoRAProbeRouter

    saved = json.loads((trained / "router" / "policy.json").read_text())
    assert saved["format_version"] == 3 and saved["ladder"] == LADDER and saved["router_type"] == "lora-probe"
    assert set(saved["strategies"]) <= set(STRATEGIES) and saved["strategies"]
    # the probe's rules were calibrated on the climb: every direct answer below the top is paid before deciding
    ev = json.loads((trained / "evaluation.json").read_text())
    climbs = {tuple(r["calibration"]["paid_stages"]) for r in ev["rows"] if r["kind"] == "rule"}
    assert climbs == {("small_direct", "mid_direct")}
    router = load_router(trained / "router")
    assert isinstance(router, LoRAProbeRouter) and router.policy.ladder == LADDER
    assert "probe" in ev and ev["probe"]["final_train_loss"] > 0


def _route(vlm, sample):
    """Route `sample`; check the strategy is the ladder's and the answer comes from the model the trace names (the
    same text as that strategy run as a fixed policy on the same models)."""
    from routedvlm.inference.routed import RoutedVLM
    from routedvlm.router.strategies import parse_strategy

    out = vlm(image=sample.image, question=sample.question)
    policy = vlm.active_router.policy
    assert out.strategy in STRATEGIES and out.strategy in [*policy.strategies, policy.fallback]
    answerer = parse_strategy(out.strategy).model
    ran = [r for r in out.trace if r["stage"] != "decision"]
    # the stage that answered: an accepted paid direct answer, else the last stage run (the escalation)
    answered = next((r for r in ran if r["stage"] == out.strategy), ran[-1])
    assert out.answer_model == answerer == answered["model"] and set(out.models) <= set(LADDER)
    fixed = RoutedVLM(vlm.pipeline, out.strategy)(image=sample.image, question=sample.question)
    assert fixed.answer_model == answerer and fixed.text == out.text
    return out


@pytest.fixture(scope="module")
def ladder_vlm(trained):
    from routedvlm.inference.routed import RoutedVLM

    kw = dict(max_direct_tokens=MAX_DIRECT_TOKENS, max_reason_tokens=MAX_REASON_TOKENS, device="cpu")
    return RoutedVLM.from_pretrained([TOY / m for m in LADDER], trained / "router", **kw)


def test_routed_vlm_over_the_ladder_routes_with_the_saved_probe_policy(ladder_vlm):
    from routedvlm.data.toyworld.task import make_samples

    assert type(ladder_vlm.active_router).__name__ == "LoRAProbeRouter"
    assert ladder_vlm.pipeline.aliases == tuple(LADDER)
    _route(ladder_vlm, make_samples("eval", 1, seed=5)[0])


def test_the_probe_climbs_the_ladder_and_shares_the_small_models_prefill(ladder_vlm, trained):
    """The saved policy may be a fixed rule (the probe then never runs); the probe's own certified-candidate rule,
    as the evaluation calibrated it (cascade over small_direct, mid_direct), runs it on the ladder at run time."""
    from dataclasses import replace

    from routedvlm.inference.routed import RoutedVLM
    from routedvlm.data.toyworld.task import make_samples
    from routedvlm.router.lora_probe import LoRAProbeRouter

    ev = json.loads((trained / "evaluation.json").read_text())
    row = next(r for r in ev["rows"] if r["kind"] == "rule" and r["rule"]["name"] == "lagrangian")
    loaded = ladder_vlm.active_router
    policy = replace(loaded.policy, rule=row["rule"], mode=row["calibration"]["mode"],
                     paid_stages=list(row["calibration"]["paid_stages"]))
    vlm = RoutedVLM(ladder_vlm.pipeline, LoRAProbeRouter(policy, loaded.net))
    out = _route(vlm, make_samples("eval", 1, seed=6)[0])
    stages = [(r["stage"], r["model"]) for r in out.trace]
    assert stages[0] == ("small_direct", "small") and ("mid_direct", "mid") in stages  # climbed before deciding
    decision = next(r for r in out.trace if r["stage"] == "decision")
    assert decision.get("probe_shared_prefill") is True, decision
