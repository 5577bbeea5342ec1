"""Router type `mf`: matrix factorisation (RouteLLM's strongest family), P(correct | prompt, strategy) =
σ(<v_s, W·z> + b_s), z the standardised feature vector, W a learned low-rank projection shared by all strategies.

Runtime: `MFRouter`. Artifact: policy.json + `mf.safetensors`. Training: `routedvlm.training.mf.train_mf`
(registered in `routedvlm.router.router_types`). Contract: tests/router/test_routers.py.
"""
from .router import MF_FILE, MFRouter, mf_proba

__all__ = ["MF_FILE", "MFRouter", "mf_proba"]
