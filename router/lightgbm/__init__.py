"""Router type `lightgbm`: one LightGBM binary model per candidate strategy, P(correct) from tabular features.

Runtime: `LightGBMRouter`. Artifact: policy.json + `model_<strategy>.txt` (LightGBM text models; a
strategy whose training labels were constant is `params["constants"]`). Training: `routedvlm.training.lightgbm.trainer.
train_lightgbm` (registered in `routedvlm.router.router_types`). Contract: tests/router/test_routers.py.
"""
from .router import LightGBMRouter

__all__ = ["LightGBMRouter"]
