"""The knn router type: a worked example checkable by hand, the bank's file round trip, and bad banks refused."""
import numpy as np
import pandas as pd
import pytest

from routedvlm.errors import RouterError
from routedvlm.router import Policy, load_router
from routedvlm.router.knn import KNNRouter

FEATURES = ["feat__prompt__a", "feat__prompt__b"]
STRATEGIES = ["small_direct", "large_direct"]


def _router(k=2, prior=0.0, x=None):
    # four training prompts on the axes; small_direct right on the +a side, large_direct everywhere but -b
    x = np.array([[1, 0], [2, 0], [-1, 0], [0, -1]], dtype=np.float32) if x is None else x
    y = np.array([[1, 1], [1, 1], [0, 1], [0, 0]], dtype=np.float32)
    policy = Policy(router_type="knn", strategies=STRATEGIES, mode="one-shot", features=FEATURES,
                    expected_cost_ms={"small_direct": 10.0, "large_direct": 100.0}, tau=0.5, fallback="large_direct",
                    params={"knn": {"k": k, "prior": prior}})
    return KNNRouter(policy, {"x": x, "y": y, "mean": np.zeros(2, np.float32), "std": np.ones(2, np.float32)})


def test_worked_example_the_share_of_the_nearest_prompts_smoothed_by_the_base_rate():
    router = _router(k=2, prior=0.0)
    p = router.predict_proba(pd.DataFrame([[3.0, 0.1]], columns=FEATURES))
    # cosine: nearest are (1,0) and (2,0) (both small right) -> 2/2; large right on both -> 2/2
    assert p.iloc[0].tolist() == [1.0, 1.0]
    p = router.predict_proba(pd.DataFrame([[0.1, -3.0]], columns=FEATURES))
    # nearest: (0,-1) [0,0] then (1,0)/(2,0) tie at cos 0.033 -> the first in bank order, (1,0) [1,1]: 1/2, 1/2
    assert p.iloc[0].tolist() == [0.5, 0.5]
    smoothed = _router(k=2, prior=2.0).predict_proba(pd.DataFrame([[0.1, -3.0]], columns=FEATURES))
    # (hits + prior * base rate) / (k + prior): small (1 + 2 * 0.5) / 4 = 0.5; large (1 + 2 * 0.75) / 4 = 0.625
    assert smoothed.iloc[0].tolist() == [0.5, 0.625]
    assert router.decide({"feat__prompt__a": 3.0, "feat__prompt__b": 0.1}).strategy == "small_direct"


def test_a_missing_value_counts_as_the_training_mean():
    router = _router(k=4, prior=0.0)
    p = router.predict_proba(pd.DataFrame([[np.nan, np.nan]], columns=FEATURES))
    assert p.iloc[0].tolist() == [0.5, 0.75]  # at the mean every bank row is a neighbour (k = 4)


def test_a_column_major_bank_round_trips_through_its_file(tmp_path):
    """Regression: safetensors writes an array's buffer, so a Fortran-ordered bank came back scrambled."""
    x = np.asfortranarray(np.array([[1, 0], [2, 0], [-1, 0], [0, -1]], dtype=np.float32))
    router = _router(x=x)
    loaded = load_router(router.save(tmp_path / "r"))
    assert np.array_equal(loaded.x, np.ascontiguousarray(x))
    rows = pd.DataFrame([[3.0, 0.1], [0.1, -3.0], [-2.0, 0.5]], columns=FEATURES)
    assert loaded.predict_proba(rows).equals(router.predict_proba(rows))


def test_a_bank_that_does_not_fit_the_policy_is_refused_naming_every_problem():
    policy = _router().policy
    with pytest.raises(RouterError, match=r"^KNNRouter: y must be \(4 rows, 2 strategies\); got \(4, 3\); mean and std "
                                          r"must be \(2,\) with std > 0"):
        KNNRouter(policy, {"x": np.zeros((4, 2)), "y": np.zeros((4, 3)), "mean": np.zeros(2), "std": np.zeros(2)})
    policy.params["knn"] = {"k": 0}
    with pytest.raises(RouterError, match=r"params.knn.k must be a positive integer; got 0"):
        KNNRouter(policy, {"x": np.zeros((4, 2)), "y": np.zeros((4, 2)), "mean": np.zeros(2), "std": np.ones(2)})
