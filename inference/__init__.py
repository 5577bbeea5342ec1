"""routedvlm.inference — model sides (`sides/`), the collaborative pipeline, RoutedVLM; `serving/`, `profiling/`
subpackages.

Public names are imported lazily (module `__getattr__`), so `import routedvlm.inference` stays light.
File map: docs/layout.md.
"""
from __future__ import annotations

import importlib

_LAZY = {
    "VLM": "sides.local.side",
    "CollaborativePipeline": "pipeline",
    "PipelineConfig": "pipeline_parts",
    "Result": "pipeline_parts",
    "Handoff": "pipeline_parts",
    "MutualVerification": "mutual_verification",
    "SELECTORS": "selectors",
    "Generation": "sides.results",
    "build_tiny_vlm": "tiny",
    "build_tiny_pair": "tiny",
    "PromptConfig": "prompts",
    "PromptTemplate": "prompts",
    "RoutedVLM": "routed",
    "RoutedOutput": "policy_runner",
    "OpenAIVLM": "sides.http.side",
    "ModelSide": "sides.base",
    "load_side": "sides",
}
__all__ = sorted(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
