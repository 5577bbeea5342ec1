"""Every data-dependent choice of train-router is made on the training split (issue 27): the boosting rounds chosen
by cross-validation, the models, the reference strategy and the rule family's order come out the same whatever the
calibration and test rows are."""
import pandas as pd

from routedvlm.training.calibration.certify import ordered_chains, risk_spec
from routedvlm.training.config import TrainConfig
from routedvlm.training.lightgbm.trainer import fit_router
from routedvlm.training.split import Split
from routedvlm.training.synthetic import make_synthetic_labels

CANDIDATES = ["small_direct", "large_direct", "transfer_16", "transfer_64", "large_reason"]


def _fit(train, calib, test):
    cfg = TrainConfig(no_mlflow=True, num_boost_round=80, cv_folds=3)
    features = [c for c in train.columns if c.startswith("feat__prompt__") or c.startswith("feat__large_direct__")]
    router = fit_router(cfg, Split(train, calib, test), CANDIDATES, features, ["large_direct"], "h")
    spec = risk_spec({"kind": "accuracy", "value": 0.95}, train, CANDIDATES)
    chains = ordered_chains(router, train, spec)
    models = {s: b.model_to_string() for s, b in router.boosters.items()}
    return router.policy.params["lightgbm"]["rounds"], models, spec.reference, {k: [m.name for m in v] for k, v in chains.items()}


def test_changing_calibration_and_test_rows_changes_no_choice_made_on_training_rows():
    train = make_synthetic_labels(600, seed=21)
    a = _fit(train, make_synthetic_labels(200, seed=22), make_synthetic_labels(200, seed=23))
    # other calibration and test rows: other values, and all of large_reason wrong on them
    other = make_synthetic_labels(300, seed=24).assign(correct__large_reason=False)
    b = _fit(train, other, other)
    assert a == b
    rounds = a[0]
    assert all(1 <= r <= 80 for r in rounds.values()) and len(set(rounds.values())) > 1  # chosen per strategy by CV
    c = _fit(pd.concat([train, make_synthetic_labels(300, seed=25)]), other, other)
    assert c[0] != a[0]  # ... and they do depend on the training rows


def test_the_self_probe_layer_is_chosen_on_the_training_rows_only():
    import numpy as np

    from routedvlm.router.self_probe import HIDDEN_KEY
    from routedvlm.training.probe.self_probe import HiddenInfo, choose_layer

    rng = np.random.default_rng(0)

    def rows(n, signal_layer):  # 3 captured layers of width 4; only `signal_layer` carries large_direct's outcome
        y = rng.random(n) < 0.6
        blocks = [rng.normal(size=(n, 4)) + (2.0 * y[:, None] if i == signal_layer else 0.0) for i in range(3)]
        return pd.DataFrame({"correct__large_direct": y, HIDDEN_KEY: list(np.concatenate(blocks, axis=1))})

    info = HiddenInfo([4, 8, 11], "all_mean", 12, "large", None, 0.0, 0, 0)
    train = rows(200, signal_layer=1)
    for other in (rows(100, 0), rows(100, 2)):  # calibration/test rows whose signal sits elsewhere change nothing
        split, chosen = choose_layer(Split(train, other, other), info)
        assert chosen.layers == [8] and chosen.size == 4 and set(chosen.layer_scores) == {"4", "8", "11"}
        assert all(len(v) == 4 for part in (split.train, split.calibration, split.test) for v in part[HIDDEN_KEY])
        assert np.allclose(split.train[HIDDEN_KEY].iloc[0], train[HIDDEN_KEY].iloc[0][4:8])
