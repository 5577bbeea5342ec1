"""The certified policy on synthetic labels with a known ground truth: target met, near the oracle, never slower on
calibration than a certified baseline, not dominated on test, and the saved router folder reproduces its decisions."""
import json

import numpy as np
import pandas as pd
import pytest

from routedvlm.router.load import load_router
from routedvlm.router.policy import Policy


def _row(ev, kind=None, name=None):
    return next(r for r in ev["rows"] if (kind is None or r["kind"] == kind) and (name is None or r["name"].startswith(name)))


def test_certified_calibration_holds_on_held_out_data(trained):
    ev = trained.evaluation
    cert, chosen = ev["certificate"], ev["calibration"]["chosen"]
    assert cert["feasible"] and cert["certified"] and chosen["certified"]
    assert cert["p_value"] <= cert["level_per_chain"] == pytest.approx(0.1 / 4)
    assert cert["n"] == ev["split"]["calibration"] and cert["reference"] == "large_reason"
    # the certified claim: accuracy >= accuracy(large_reason) - alpha; on 800 unseen rows (SE ~ 0.01) it holds up to noise
    learned = _row(ev, "learned")
    assert learned["accuracy"] >= ev["required_test"] - 2 * ev["standard_error_test"]
    assert trained.router.policy.decision_rule == chosen["rule"]
    assert trained.router.policy.certificate == cert


def test_learned_policy_is_near_the_oracle_and_far_cheaper_than_large_reason(trained):
    ev = trained.evaluation
    learned, oracle, large_reason = _row(ev, "learned"), _row(ev, "oracle"), _row(ev, name="large_reason")
    # ground truth: ~8% of samples only large_reason solves and the cascade always pays large_direct, so the
    # learned policy cannot match the oracle; it must stay within 3.5x of it while meeting the certified target
    assert learned["mean_latency_ms"] <= 3.5 * oracle["mean_latency_ms"]
    assert learned["speedup_vs_large_reason"] >= 2.5
    assert large_reason["speedup_vs_large_reason"] == pytest.approx(1.0)
    assert max(ev["auc"]["tau"], ev["auc"]["lagrangian"]) > ev["auc_single_strategies"]


def test_chosen_rule_is_never_slower_on_calibration_than_a_certified_baseline(trained):
    ev = trained.evaluation
    chosen = ev["calibration"]["chosen"]
    for chain, best in ev["calibration"]["best_per_chain"].items():
        assert best is None or chosen["mean_latency_ms"] <= best["mean_latency_ms"], chain
    learned = _row(ev, "learned")
    fixed = [r for r in ev["rows"] if r["kind"] == "baseline"]
    assert {r["name"] for r in fixed} == {f"mutual verification K={k}" for k in (16, 32, 64, 128, 256, "all")}
    for r in fixed + [r for r in ev["rows"] if r["kind"] == "single"]:
        dominated = r["accuracy"] >= learned["accuracy"] and r["mean_latency_ms"] <= learned["mean_latency_ms"]
        assert not dominated, r["name"]


def test_saved_router_reproduces_the_decisions(trained, synthetic_df):
    folder = trained.output_dir / "router"
    assert sorted(p.name for p in folder.iterdir())[-1] == "policy.json"
    assert not [p for p in folder.iterdir() if p.suffix in (".pkl", ".pickle")]
    loaded = load_router(folder)
    rows = synthetic_df.head(200)
    before = trained.router.decide_batch(rows)
    after = loaded.decide_batch(rows)
    assert [d.strategy for d in before] == [d.strategy for d in after]
    assert np.allclose([list(d.p_correct.values()) for d in before], [list(d.p_correct.values()) for d in after])
    one = loaded.decide(rows.iloc[0].to_dict())
    assert one.strategy == before[0].strategy and one.keep_tokens == before[0].keep_tokens
    ev = json.loads((trained.output_dir / "evaluation.json").read_text())
    assert ev["rule"] == loaded.policy.decision_rule and (trained.output_dir / "curve.png").stat().st_size > 10_000


def test_policy_records_mode_costs_and_provenance(trained):
    p = trained.router.policy
    assert p.mode == "cascade" and p.paid_stages == ["large_direct"]
    assert all(f.startswith(("feat__prompt__", "feat__large_direct__")) for f in p.features)
    assert p.expected_cost_ms["large_direct"] == 0.0
    assert p.expected_cost_ms["transfer_16"] < p.expected_cost_ms["transfer_256"] < p.expected_cost_ms["large_reason"]
    assert p.fallback == "large_reason" and p.training_data_hash == "synthetic-0"
    assert p.prompt_template == {"name": "custom", "text": "{question} Be brief.", "instructions": None}
    assert Policy.load(trained.output_dir / "router").prompt_template == p.prompt_template  # RoutedVLM applies it
    # certified at delta 0.1 on labels with a known ground truth: the held-out test rows meet the target too
    learned = trained.evaluation["rows"][-1]
    assert p.metrics["test_target_met"] is True and learned["accuracy"] >= p.metrics["test_required_accuracy"]
    assert p.target == {"kind": "accuracy", "value": 0.95, "loss": "difference", "test": "betting"}
    assert p.metrics["calibration_rows"] > 0 and p.metrics["certificate_delta"] == 0.1
    assert p.certificate["method"].startswith("learn-then-test: accuracy difference, Waudby-Smith-Ramdas")


@pytest.mark.slow
def test_one_shot_and_latency_budget(synthetic_df, tmp_path):
    from routedvlm.training.config import TrainConfig
    from routedvlm.training.pipeline import train_router

    config = TrainConfig(output_dir=str(tmp_path), no_mlflow=True, mode="one-shot", max_latency_ms=1500,
                         num_boost_round=60)
    res = train_router(config, synthetic_df.head(2000).copy(), {})
    p = res.router.policy
    assert p.paid_stages == [] and all(f.startswith("feat__prompt__") for f in p.features)
    assert res.evaluation["calibration"]["mean_latency_ms"] <= 1500
    assert _row(res.evaluation, "learned")["mean_latency_ms"] <= 1500 * 1.1
    assert res.evaluation["certificate"]["delta"] is None  # budgets are not certified, and the table says so
    assert "not certified" in res.table
