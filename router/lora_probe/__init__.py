"""Router type `lora-probe`: the small VLM (+ a LoRA adapter on its last layer) reads the image and question, and a
head turns its last hidden state (+ stage features) into P(correct) per candidate strategy.

Runtime: `LoRAProbeRouter` and its run-time hooks, `ProbeNet` (the forward), the artifact (`adapter/` peft LoRA
weights + config, `head.safetensors`; no pickle). Training:
`routedvlm.training.probe.lora_probe.train_probe` (registered in `routedvlm.router.router_types`). Importing this
package imports neither torch nor peft; building or loading a probe does. Contract: tests/router/test_routers.py.
"""
from .files import ADAPTER_DIR, HEAD_FILE, target_regex
from .net import ProbeNet, SharedPrefill, sample_inputs
from .router import BASE_ENV, SHARED_KEY, LoRAProbeRouter, build_net, load_base

__all__ = ["ADAPTER_DIR", "BASE_ENV", "HEAD_FILE", "LoRAProbeRouter", "ProbeNet", "SHARED_KEY", "SharedPrefill",
           "build_net", "load_base", "sample_inputs", "target_regex"]
