"""Router type `lightgbm` (router/lightgbm/): what its boosters predict and decide, and its input errors."""
import numpy as np
import pandas as pd
import pytest

from routedvlm.router import Policy, RouterError


def test_lightgbm_router_behaviour(lgbm_router, feature_table):
    p = lgbm_router.predict_proba(feature_table)
    assert list(p.columns) == ["large_direct", "transfer_16", "transfer_64", "large_reason"] and (p["large_reason"] == 0.97).all()
    conf = feature_table["feat__large_direct__confidence"]
    chosen = pd.Series(lgbm_router.decide_with_tau(feature_table, 0.6))
    assert (chosen[conf > 0.8] == "large_direct").all()
    assert (chosen[(conf > 0.3) & (conf < 0.4)] == "transfer_64").all()
    assert (chosen[conf < 0.2] == "large_reason").all()
    with pytest.raises(RouterError, match=r"^LightGBMRouter needs a booster or a constant for every strategy: missing \['large_reason'\]"):
        type(lgbm_router)(Policy(**{**lgbm_router.policy.to_dict(), "params": {}}), lgbm_router.boosters)


def test_decide_input_errors_and_missing_values(lgbm_router, feature_table):
    row = feature_table.iloc[0].to_dict()
    with pytest.raises(RouterError, match=r"^Features must be numeric \(NaN allowed\)"):
        lgbm_router.decide({**row, "feat__prompt__question_words": "long"})
    with pytest.raises(RouterError, match=r"^decide\(\) takes a dict of features. Got DataFrame"):
        lgbm_router.decide(feature_table.head(1))
    none_row = {**row, "feat__large_direct__confidence": None}
    nan_frame = feature_table.head(1).assign(feat__large_direct__confidence=np.nan)
    assert lgbm_router.decide(none_row) == lgbm_router.decide_batch(nan_frame)[0]  # None = missing = NaN
