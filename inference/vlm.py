"""Where `VLM` was defined before the model sides got their own subpackage: the same names, from `sides/`.

`from routedvlm.inference.vlm import VLM` keeps working; new code imports from `routedvlm.inference.sides`.
"""
from __future__ import annotations

from .sides.base import THINK_CLOSE, THINK_OPEN
from .sides.local.side import VLM, resolve_device, set_threads, torch_dtype

__all__ = ["THINK_CLOSE", "THINK_OPEN", "VLM", "resolve_device", "set_threads", "torch_dtype"]
