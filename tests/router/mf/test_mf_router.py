"""The mf router type: a worked example checkable by hand, missing values, the file round trip, bad arrays refused."""
import numpy as np
import pandas as pd
import pytest

from routedvlm.errors import RouterError, RouterLoadError
from routedvlm.router import Policy, load_router
from routedvlm.router.mf import MF_FILE, MFRouter

FEATURES = ["feat__prompt__a", "feat__prompt__b"]
STRATEGIES = ["small_direct", "large_direct"]


def _arrays(**over):
    # z = (x - [1, 0]) / [2, 1]; one factor h = z_a - z_b; small: logit 2h, large: logit ln 3 (P = 0.75 everywhere)
    return {"mean": np.array([1.0, 0.0]), "std": np.array([2.0, 1.0]), "proj": np.array([[1.0, -1.0]]),
            "emb": np.array([[2.0], [0.0]]), "bias": np.array([0.0, np.log(3.0)]), **over}


def _router(**over):
    policy = Policy(router_type="mf", strategies=STRATEGIES, mode="one-shot", features=FEATURES,
                    expected_cost_ms={"small_direct": 10.0, "large_direct": 100.0}, tau=0.5, fallback="large_direct",
                    params={"mf": {"rank": 1}})
    return MFRouter(policy, _arrays(**over))


def test_worked_example_sigmoid_of_the_strategy_embedding_times_the_projected_prompt():
    router = _router()
    p = router.predict_proba(pd.DataFrame([[3.0, 0.0], [1.0, 0.5]], columns=FEATURES))
    # row 1: z = (1, 0), h = 1, small logit 2 -> 1/(1+e^-2) = 0.8808; row 2: z = (0, 0.5), h = -0.5, logit -1 -> 0.2689
    assert p["small_direct"].tolist() == pytest.approx([1 / (1 + np.exp(-2)), 1 / (1 + np.exp(1))])
    assert p["large_direct"].tolist() == pytest.approx([0.75, 0.75])
    assert router.decide({"feat__prompt__a": 3.0, "feat__prompt__b": 0.0}).strategy == "small_direct"
    assert router.decide({"feat__prompt__a": 1.0, "feat__prompt__b": 0.5}).strategy == "large_direct"


def test_a_missing_value_counts_as_the_training_mean():
    router = _router()
    p = router.predict_proba(pd.DataFrame([[np.nan, np.nan]], columns=FEATURES))
    assert p["small_direct"].iloc[0] == pytest.approx(0.5)  # z = 0, h = 0
    assert router.decide({"feat__prompt__a": None, "feat__prompt__b": 0.0}).p_correct["small_direct"] == pytest.approx(0.5)


def test_round_trip_and_a_damaged_file_is_refused(tmp_path):
    router = _router()
    folder = router.save(tmp_path / "r")
    assert (folder / MF_FILE).exists()
    loaded = load_router(folder)
    x = pd.DataFrame([[0.3, -2.0], [5.0, 1.0]], columns=FEATURES)
    assert loaded.predict_proba(x).values.tolist() == router.predict_proba(x).values.tolist()
    (folder / MF_FILE).write_bytes(b"not safetensors")
    with pytest.raises(RouterLoadError):
        load_router(folder)


@pytest.mark.parametrize("over, message", [
    ({"proj": np.ones((1, 3))}, r"proj must be \(rank >= 1, 2 features\); got \(1, 3\)"),
    ({"emb": np.ones((2, 2))}, r"emb must be \(2 strategies, rank 1\); got \(2, 2\)"),
    ({"std": np.array([1.0, 0.0])}, r"mean and std must be \(2,\) with std > 0"),
    ({"bias": np.array([np.nan, 0.0])}, r"the arrays hold NaN or infinite values"),
])
def test_bad_arrays_are_refused_with_what_to_do(over, message):
    with pytest.raises(RouterError, match=rf"^MFRouter: {message}.*Retrain with train-router --router mf\."):
        _router(**over)
