"""Routers for the RoutedVLM and server tests: a one-shot LightGBM router on question length, trained
inline with lightgbm, and a cascade router that reads every feature (for feature-parity checks)."""
import numpy as np

PROMPT_FEATURE = "feat__prompt__question_chars"
# question chars < 20 -> small_direct, < 45 -> large_direct, else transfer_8 (the policy's ground truth)
ROUTE_BOUNDS = ((20, "small_direct"), (45, "large_direct"), (10**9, "transfer_8"))


def expected_route(question: str) -> str:
    return next(s for bound, s in ROUTE_BOUNDS if len(question) < bound)


def save_prompt_router(out_dir, prompt_template=None):
    """A one-shot LightGBM router: P(small_direct) high for short questions, P(large_direct) for medium
    ones, transfer_8 a constant 0.9. Costs make small_direct < large_direct < transfer_8."""
    import lightgbm

    from routedvlm.router import LightGBMRouter, Policy

    x = np.repeat(np.arange(0.0, 90.0), 4)[:, None]
    boosters = {}
    for bound, s in ROUTE_BOUNDS[:2]:
        params = {"objective": "binary", "verbose": -1, "num_threads": 1, "min_data_in_leaf": 3, "seed": 0}
        boosters[s] = lightgbm.train(params, lightgbm.Dataset(x, (x[:, 0] < bound - 0.5).astype(int)), num_boost_round=20)
    policy = Policy(router_type="lightgbm", mode="one-shot", strategies=["small_direct", "large_direct", "transfer_8"],
                    expected_cost_ms={"small_direct": 10.0, "large_direct": 30.0, "transfer_8": 90.0},
                    features=[PROMPT_FEATURE], tau=0.5, fallback="large_direct", params={"constants": {"transfer_8": 0.9}},
                    prompt_template=prompt_template)
    return LightGBMRouter(policy, boosters).save(out_dir)


def every_feature_router(strategy="transfer_8", *, fail=False, prompt_template=None):
    """A cascade router whose policy uses every registered feature; it always picks `strategy` (or raises)."""
    import pandas as pd

    from routedvlm.inference.features import feature_names
    from routedvlm.router import Policy, Router

    class EveryFeature(Router):
        def predict_proba(self, features):
            if fail:
                raise RuntimeError("scoring exploded")
            return pd.DataFrame({strategy: np.ones(len(features))}, index=features.index)

    policy = Policy(router_type="test-every-feature", mode="cascade", strategies=[strategy],
                    paid_stages=["large_direct", "small_direct"], features=feature_names(), fallback=strategy,
                    prompt_template=prompt_template)
    return EveryFeature(policy)
