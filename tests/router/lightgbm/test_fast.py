"""LightGBM's single-row fast path answers what Booster.predict answers (within 1e-9, on random rows and on every
row of the bundled toy-world labels), the router falls back to Booster.predict where the fast path is unavailable, and
no tree that LightGBM's own parse shows to loop reaches either engine, however the file spells its integers."""
import re
from pathlib import Path

import lightgbm
import numpy as np
import pandas as pd
import pytest
from damage_helpers import LIGHTGBM, LOOSE_LOOPS

from routedvlm.errors import RouterError
from routedvlm.router import LightGBMRouter, Policy
from routedvlm.router.lightgbm import fast
from routedvlm.router.lightgbm.trees import tree_problem

LABELS = Path(__file__).resolve().parents[3] / "data" / "toyworld" / "labels.parquet"


def _booster_values(router, rows: np.ndarray) -> dict:
    return {s: b.predict(rows, num_threads=1) for s, b in router.boosters.items()}


def _assert_same(router, rows: np.ndarray) -> None:
    assert router._fast is not None
    want = _booster_values(router, rows)
    for i, row in enumerate(rows):
        got = router._proba_row(dict(zip(router.policy.features, row)))
        for s in router.policy.strategies:
            expected = want[s][i] if s in want else router.constants[s]
            assert abs(got[s] - expected) <= 1e-9, (i, s, got[s], expected)


def test_fast_path_equals_booster_predict_on_random_rows(lgbm_router, feature_table):
    rng = np.random.default_rng(5)
    rows = feature_table.to_numpy(dtype=float)
    wild = rng.normal(0, 50, size=(200, rows.shape[1]))
    wild[rng.uniform(size=wild.shape) < 0.2] = np.nan  # missing values take each split's default direction
    wild[:5] = [[0.0] * rows.shape[1], [1e300] * rows.shape[1], [-1e300] * rows.shape[1], [np.nan] * rows.shape[1],
                [-0.0] * rows.shape[1]]
    _assert_same(lgbm_router, np.vstack([rows, wild]))


def test_every_booster_is_scored_by_one_merged_model(lgbm_router):
    assert isinstance(lgbm_router._fast, fast.MergedRows)
    assert lgbm_router._fast.booster.num_model_per_iteration() == len(lgbm_router.boosters)


def test_a_model_of_another_objective_gets_one_fast_call_per_booster(lgbm_router, feature_table):
    """Only binary models are merged (their sigmoid is applied outside LightGBM); cross-entropy ones are not."""
    x = feature_table.to_numpy(dtype=float)
    y = (x[:, 1] > 0.5).astype(float)
    xent = lightgbm.train({"objective": "cross_entropy", "verbose": -1, "num_threads": 1, "min_data_in_leaf": 5},
                          lightgbm.Dataset(x, y), num_boost_round=10)
    router = LightGBMRouter(lgbm_router.policy, {**lgbm_router.boosters, "transfer_16": xent})
    assert isinstance(router._fast, fast.FastRows)
    _assert_same(router, x)


def test_a_raw_score_past_exp_overflow_gives_what_lightgbm_gives(lgbm_router, feature_table):
    """LightGBM's C exp returns inf for a huge raw score (probability 0.0); Python's math.exp raises instead."""
    text = re.sub(r"\ntree_sizes=[^\n]*", "", lgbm_router.boosters["large_direct"].model_to_string())  # sizes change
    huge = re.sub(r"(Tree=0\n(?:.*\n)*?leaf_value=)([^\n]*)", lambda m: m[1] + " ".join(["-900"] * len(m[2].split())),
                  text, count=1)
    booster = lightgbm.Booster(model_str=huge)
    router = LightGBMRouter(lgbm_router.policy, {**lgbm_router.boosters, "large_direct": booster})
    assert isinstance(router._fast, fast.MergedRows)
    rows = feature_table.to_numpy(dtype=float)[:20]
    assert (booster.predict(rows) == 0.0).all()
    _assert_same(router, rows)


def test_fast_path_honours_best_iteration(feature_table):
    x = feature_table.to_numpy(dtype=float)
    y = (x[:, 1] > 0.5).astype(int)
    booster = lightgbm.train({"objective": "binary", "verbose": -1, "num_threads": 1, "min_data_in_leaf": 5},
                             lightgbm.Dataset(x, y), num_boost_round=30)
    booster.best_iteration = 4  # what cross-validated training records; Booster.predict then uses 4 trees
    policy = Policy(router_type="lightgbm", strategies=["large_direct"], features=list(feature_table.columns),
                    paid_stages=["large_direct", "small_direct"], fallback="large_direct")
    router = LightGBMRouter(policy, {"large_direct": booster})
    _assert_same(router, x[:50])
    assert router._proba_row(dict(zip(policy.features, x[0])))["large_direct"] != pytest.approx(
        booster.predict(x[:1], num_iteration=-1)[0], abs=1e-12)


def test_fast_path_equals_booster_predict_on_every_bundled_label_row():
    """The shipped trainer on the bundled labels (all features, every strategy with a model), then every row."""
    from routedvlm.training.fit import fit_models

    df = pd.read_parquet(LABELS)
    features = [c for c in df.columns if c.startswith("feat__")]
    strategies = [c[len("correct__"):] for c in df.columns if c.startswith("correct__")]
    boosters, constants = fit_models(df, features, strategies, num_boost_round=60)
    policy = Policy(router_type="lightgbm", strategies=strategies, features=features, paid_stages=["large_direct", "small_direct"],
                    mode="cascade", fallback="large_reason", params={"constants": constants},
                    expected_cost_ms={s: float(i) for i, s in enumerate(strategies)})
    router = LightGBMRouter(policy, boosters)
    _assert_same(router, df[features].to_numpy(dtype=float))
    assert [d.strategy for d in router.decide_batch(df)] == [router.decide(r).strategy for r in
                                                             df[features].to_dict(orient="records")]


def test_the_router_falls_back_to_booster_predict_without_the_fast_path(lgbm_router, feature_table, monkeypatch):
    monkeypatch.setitem(fast._API, "fns", None)  # as on a LightGBM without LGBM_BoosterPredictForMatSingleRowFast
    slow = LightGBMRouter(lgbm_router.policy, lgbm_router.boosters)
    assert slow._fast is None
    for row in feature_table.head(40).to_dict(orient="records"):
        assert slow.decide(row) == lgbm_router.decide(row)


@pytest.mark.parametrize("kind", LOOSE_LOOPS + ("child_cycle",))
def test_a_looping_tree_is_refused_however_its_children_are_spelled(lgbm_router, kind):
    """LightGBM loads these files and its prediction never returns; the check reads LightGBM's own parse."""
    text = LIGHTGBM[kind](lgbm_router.boosters["large_direct"].model_to_string().encode()).decode()
    damaged = lightgbm.Booster(model_str=text)  # LightGBM's parser accepts it
    assert tree_problem(damaged.model_to_string()) == "Tree=0 is not a tree (a child link loops or points nowhere)"
    with pytest.raises(RouterError, match=r"^The LightGBM model of 'large_direct' is damaged: Tree=0 is not a tree"):
        LightGBMRouter(lgbm_router.policy, {**lgbm_router.boosters, "large_direct": damaged})


def test_tree_check_accepts_real_models_and_single_leaf_trees(lgbm_router, feature_table):
    for booster in lgbm_router.boosters.values():
        assert tree_problem(booster.model_to_string()) is None
    x = feature_table.to_numpy(dtype=float)
    stump = lightgbm.train({"objective": "binary", "verbose": -1, "num_threads": 1, "min_data_in_leaf": 500},
                           lightgbm.Dataset(x, (x[:, 1] > 0.5).astype(int)), num_boost_round=3)
    text = stump.model_to_string()
    assert re.search(r"^num_leaves=1$", text, re.M) and tree_problem(text) is None


def test_fast_path_reads_every_numeric_spelling_like_booster_predict(lgbm_router, feature_table, monkeypatch):
    row = feature_table.iloc[3].to_dict()
    f0, f1, f2 = lgbm_router.policy.features
    spellings = [{**row, f0: None}, {**row, f0: np.int64(12)}, {**row, f1: "0.8"}, {**row, f2: True},
                 {**row, f0: np.float32(7.5)}, {**row, f1: float("nan")}]
    monkeypatch.setitem(fast._API, "fns", None)
    slow = LightGBMRouter(lgbm_router.policy, lgbm_router.boosters)
    for r in spellings:
        assert lgbm_router._proba_row(r) == slow._proba_row(r), r
    with pytest.raises(RouterError, match="^Features must be numeric"):
        lgbm_router._proba_row({**row, f0: "many"})


def test_threads_deciding_at_once_each_get_their_own_row(lgbm_router, feature_table):
    """The fast path's row buffer is shared; a lock keeps concurrent decisions (serve's threads) apart."""
    import sys
    from concurrent.futures import ThreadPoolExecutor

    rows = feature_table.to_dict(orient="records")
    want = [lgbm_router._proba_row(r) for r in rows]
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch between almost every bytecode: a race shows at once
    try:
        with ThreadPoolExecutor(8) as pool:
            for _ in range(5):
                assert list(pool.map(lgbm_router._proba_row, rows)) == want
    finally:
        sys.setswitchinterval(old)
