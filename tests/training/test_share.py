"""--calib-fraction auto (training/share.py): the share is chosen from rows that train under every candidate share,
never from calibration or test rows; the choice round-trips to policy.json and MLflow's params; and the certificate
still holds at delta when the share is chosen this way (repeated draws on synthetic truth)."""
import json

import numpy as np
import pytest

from routedvlm.errors import ConfigError
from routedvlm.training import share as sharemod
from routedvlm.training.lightgbm.trainer import choose_share
from routedvlm.training.config import TrainConfig
from routedvlm.training.split import split_labels
from routedvlm.training.synthetic import make_synthetic_labels

CANDIDATES = ["large_direct", "small_reason", "transfer_16", "large_reason"]
SMALL = dict(no_mlflow=True, mode="one-shot", num_boost_round=30, cv_folds=0, strategies=CANDIDATES)


def _features(df):
    return [c for c in df.columns if c.startswith("feat__prompt__")]


def _choose(labels, seed=0, candidates=CANDIDATES, repeats=sharemod.REPEATS, **kw):
    cfg = TrainConfig(calib_fraction="auto", seed=seed, **{**SMALL, "strategies": candidates, **kw})
    share = choose_share(cfg, labels, candidates, _features(labels), [], "h", repeats=repeats)
    return share, cfg


def test_the_choice_rows_train_under_every_candidate_share():
    labels = make_synthetic_labels(500, seed=3)
    rows = set(sharemod.choice_rows(labels, 0.2, seed=5).index)
    for s in sharemod.candidate_shares(0.2):
        split = split_labels(labels, s, 0.2, seed=5)
        assert rows <= set(split.train.index)
        assert not rows & (set(split.calibration.index) | set(split.test.index))


def test_corrupting_calibration_and_test_outcomes_does_not_change_the_choice():
    labels = make_synthetic_labels(500, seed=3)
    share, cfg = _choose(labels, repeats=2)
    assert share in sharemod.candidate_shares(0.2) and "auto" in cfg.calib_choice
    rows = sharemod.choice_rows(labels, 0.2, seed=0).index
    outcome_cols = [c for c in labels.columns if c.startswith(("correct__", "latency_ms__"))]

    def corrupt(where):
        bad = labels.copy()
        for c in outcome_cols:
            col = bad[c]
            bad.loc[where, c] = ~col[where].astype(bool) if c.startswith("correct__") else col[where] * 7.0 + 500.0
        return bad

    others = labels.index.difference(rows)  # every row that is calibration or test under some candidate share
    again, cfg2 = _choose(corrupt(others), repeats=2)
    assert (again, cfg2.calib_scores) == (share, cfg.calib_scores)
    _, cfg3 = _choose(corrupt(rows), repeats=2)  # the check can fail: corrupting the rows it does read changes the scores
    assert cfg3.calib_scores != cfg.calib_scores


def test_the_option_parses_and_round_trips_to_policy_json_and_mlflow_params(tmp_path):
    from routedvlm.training.pipeline import train_router
    from routedvlm.training.tracking import _flat_params
    from routedvlm.training.train_cli import build_parser

    args = build_parser().parse_args(["--calibration-share", "auto"])
    assert TrainConfig(**vars(args)).calib_fraction == "auto"
    assert build_parser().parse_args(["--calib-fraction", "0.3"]).calib_fraction == 0.3
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--calibration-share", "most"])
    with pytest.raises(ConfigError, match="calib_fraction"):
        TrainConfig(calib_fraction=0.7)

    labels = make_synthetic_labels(500, seed=4)
    cfg = TrainConfig(calib_fraction="auto", output_dir=str(tmp_path), **SMALL)
    result = train_router(cfg, labels, {})
    params = json.loads((tmp_path / "router" / "policy.json").read_text())["params"]["calibration_share"]
    assert params["share"] in sharemod.candidate_shares(0.2) and params["choice"].startswith(f"{params['share']:g} (auto")
    assert set(params["mean_latency_ms"]) == {f"{s:g}" for s in sharemod.candidate_shares(0.2)}
    assert result.evaluation["split"]["calibration"] == round(500 * params["share"])
    flat = _flat_params(cfg, result)
    assert float(flat["train.calib_fraction"]) == params["share"] and flat["train.calib_choice"] == params["choice"]

    given = train_router(TrainConfig(calib_fraction=0.3, output_dir=str(tmp_path / "g"), **SMALL), labels, {})
    assert given.router.policy.params["calibration_share"] == {"share": 0.3, "choice": "0.3 (given)",
                                                              "mean_latency_ms": {}}


def test_the_certificate_holds_at_delta_when_the_share_is_chosen_automatically():
    """Whole pipeline per draw (fresh labels -> choose the share -> fit -> certify); the certified member's risk on
    a large population of the same process exceeds alpha in at most delta of the draws (within binomial slack).
    Kept small to run in seconds: two candidates, the tau chain, one inner split per share."""
    from routedvlm.training.calibration.certify import certify, risk_spec
    from routedvlm.training.calibration.coverage import binomial_slack
    from routedvlm.training.calibration.rule_family import Scorer
    from routedvlm.training.lightgbm.trainer import fit_router

    pair = ["large_direct", "large_reason"]
    population = make_synthetic_labels(6000, seed=999)
    draws, delta, violations, shares, certified = 12, 0.1, 0, [], 0
    for d in range(draws):
        labels = make_synthetic_labels(400, seed=100 + d)
        share, cfg = _choose(labels, seed=d, candidates=pair, repeats=1, chains=["tau"], num_boost_round=20)
        split = split_labels(labels, share, cfg.test_fraction, d)
        router = fit_router(cfg, split, pair, _features(labels), [], "h")
        cal = certify(router, split.calibration, split.train, cfg.target, delta, chains=["tau"])
        spec = risk_spec(cfg.target, split.train, router.policy.strategies)
        scorer = Scorer(router, population)
        correct, _, _ = scorer.score(cal.chosen.member)
        violations += float(spec.losses(scorer.df, correct).mean()) > spec.alpha
        certified += not cal.trivial
        shares.append(share)
    assert violations / draws <= delta + binomial_slack(delta, draws), (violations, shares)
    assert certified >= draws // 2, (certified, shares)  # it certifies routing, so the count is not vacuous
