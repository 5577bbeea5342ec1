"""train-router at its defaults on direct-only labels (what `labels import-outcomes` writes): the auto mode picks
one-shot, says so, and certifies a rule that saves strong-model calls; a cascade there could save nothing (it pays
the strong model's direct answer first). Also: the mode given is kept, and labels with reasoning strategies keep the
cascade."""
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from routedvlm.data.labels.outcomes import import_outcomes
from routedvlm.training.config import TrainConfig
from routedvlm.training.steps import resolve_mode

GSM8K = Path(__file__).resolve().parents[1] / "data" / "routellm_gsm8k" / "gsm8k_slice.csv"


def _easy_imported(n=600, seed=0) -> pd.DataFrame:
    """A RouteLLM-style table where the weak model is right on short prompts (the prompt features see it)."""
    rng = np.random.default_rng(seed)
    words = rng.integers(3, 60, n)
    prompts = [" ".join(["word"] * int(w)) + "?" for w in words]
    weak = (words < 30) | (rng.random(n) < 0.1)
    return pd.DataFrame({"prompt": prompts, "weak": weak, "strong": rng.random(n) < 0.95,
                         "weak_response_chars": 200, "strong_response_chars": 400})


def test_defaults_on_direct_only_labels_pick_one_shot_say_so_and_save(tmp_path, caplog):
    from routedvlm.training.pipeline import train_router

    labels = import_outcomes(_easy_imported(), "routellm", order=["weak", "strong"])
    cfg = TrainConfig(no_mlflow=True, output_dir=str(tmp_path / "run"), cv_folds=0, num_boost_round=60)
    with caplog.at_level(logging.INFO, logger="routedvlm.training"):
        result = train_router(cfg, labels, {})
    policy = result.router.policy
    assert policy.mode == "one-shot" and policy.paid_stages == []
    assert policy.params["mode_choice"].startswith("one-shot (auto: the candidates small_direct, large_direct are "
                                                   "direct answers only")
    assert any("mode: one-shot (auto" in r.getMessage() for r in caplog.records)
    cert = policy.certificate
    assert cert["outcome"] == "routing" and cert["loss_kind"] == "difference"
    learned = result.evaluation["rows"][-1]
    assert learned["mean_latency_ms"] < 0.8 * float(labels["latency_ms__large_direct"].mean())  # it saves


def test_a_cascade_on_those_labels_pays_the_strong_model_first():
    cfg = TrainConfig(mode="cascade")
    assert resolve_mode(cfg, ["small_direct", "large_direct"]) == "cascade" and cfg.mode_choice == "cascade (given)"
    cfg = TrainConfig()
    assert resolve_mode(cfg, ["large_direct", "transfer_16", "large_reason"]) == "cascade"
    assert cfg.mode_choice.startswith("cascade (auto: the candidates include reasoning or transfer")
    assert TrainConfig(router="self-probe").mode == "cascade"  # the self-probe reads the large_direct pass


def test_the_gsm8k_slice_at_defaults_certifies_a_rule_not_always_the_strong_model(tmp_path):
    from routedvlm.training.pipeline import train_router

    labels = import_outcomes(pd.read_csv(GSM8K), "routellm")
    cfg = TrainConfig(no_mlflow=True, output_dir=str(tmp_path / "run"), cv_folds=0, num_boost_round=60,
                      calib_fraction=0.4)
    result = train_router(cfg, labels, {})
    assert result.router.policy.mode == "one-shot"
    assert result.router.policy.certificate["chosen"] != "fixed large_direct" or not \
        result.router.policy.certificate["feasible"]
