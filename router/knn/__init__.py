"""Router type `knn`: P(correct) per strategy from the k most similar training prompts (cosine on standardised
features, e.g. the meaning features `feat__prompt__meaning_<i>`).

Runtime: `KNNRouter`. Artifact: policy.json + `bank.safetensors`. Training: `routedvlm.training.knn.trainer.train_knn`
(registered in `routedvlm.router.router_types`). Contract: tests/router/test_routers.py.
"""
from .router import BANK_FILE, KNNRouter

__all__ = ["BANK_FILE", "KNNRouter"]
