"""Router type `self-probe`: a logistic head on the large model's own hidden state of the `large_direct` pass a
cascade already paid, plus the tabular features.

Runtime: `SelfProbeRouter` and its run-time hooks. Artifact: policy.json (`params.hidden`, the large
model's sha256) + `head.safetensors` (numpy; no torch to decide). Training:
`routedvlm.training.probe.self_probe.train_self_probe` (registered in `routedvlm.router.router_types`).
Contract: tests/router/test_routers.py.
"""
from .router import HEAD_FILE, HIDDEN_KEY, LARGE_ENV, SelfProbeRouter

__all__ = ["HEAD_FILE", "HIDDEN_KEY", "LARGE_ENV", "SelfProbeRouter"]
