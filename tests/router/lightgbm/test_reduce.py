"""The lightgbm-pca router's transform (router/lightgbm/reduce.py): a worked PCA example, missing values, the
boosters' input order, and a damaged or inconsistent reduction refused."""
import numpy as np
import pytest

from routedvlm.errors import RouterError, RouterLoadError
from routedvlm.router import load_router
from routedvlm.router.lightgbm.reduce import REDUCE_FILE, Reduction, fit_pca


def test_worked_example_points_on_a_line_reduce_to_their_signed_distance_along_it():
    # rows on the line y = x through (1, 1): the first component is (1, 1)/sqrt(2), the mean (1, 1)
    x = np.array([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]])
    r = fit_pca(x, ["m0", "m1"], 1)
    assert r.mean.tolist() == [1.0, 1.0]
    assert r.components[0] == pytest.approx([2 ** -0.5, 2 ** -0.5])
    assert r.apply(x)[:, 0] == pytest.approx([-(2 ** 0.5), 0.0, 2 ** 0.5])
    assert r.apply(np.array([[np.nan, np.nan]]))[0, 0] == 0.0  # missing: the training mean
    assert r.apply(np.array([[np.nan, 3.0]]))[0, 0] == pytest.approx(2 * 2 ** -0.5)


def test_the_boosters_read_the_kept_features_in_order_then_the_components():
    r = Reduction(["m0", "m1"], [0.0, 0.0], [[1.0, 0.0], [0.0, 2.0]])
    features = ["a", "m0", "b", "m1"]
    assert r.model_names(features) == ["a", "b", "reduce_00", "reduce_01"]
    assert r.model_matrix(features, np.array([[1.0, 2.0, 3.0, 4.0]])).tolist() == [[1.0, 3.0, 2.0, 8.0]]


def test_an_inconsistent_reduction_is_refused():
    with pytest.raises(RouterError, match=r"^The reduction must map 2 columns .* got mean \(3,\)"):
        Reduction(["m0", "m1"], [0.0, 0.0, 0.0], [[1.0, 0.0]])
    with pytest.raises(RouterError, match=r"^The reduction holds NaN"):
        Reduction(["m0", "m1"], [0.0, np.nan], [[1.0, 0.0]])


def test_the_saved_reduction_is_hashed_and_a_damaged_one_refused(lgbm_pca_router, feature_table, tmp_path):
    folder = lgbm_pca_router.save(tmp_path / "r")
    assert REDUCE_FILE in load_router(folder).policy.model_sha256
    loaded = load_router(folder)
    assert loaded.reduction.components.tolist() == lgbm_pca_router.reduction.components.tolist()
    assert loaded.predict_proba(feature_table).values.tolist() == lgbm_pca_router.predict_proba(feature_table).values.tolist()
    data = bytearray((folder / REDUCE_FILE).read_bytes())
    data[-1] ^= 0xFF
    (folder / REDUCE_FILE).write_bytes(bytes(data))
    with pytest.raises(RouterLoadError, match=REDUCE_FILE):
        load_router(folder)
