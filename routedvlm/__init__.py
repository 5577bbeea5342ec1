"""routedvlm — the package face: the names a user needs, imported on first use (so `import routedvlm` and
`routedvlm --help` stay free of torch, pandas and mlflow).

    from routedvlm import RoutedVLM, VLM, CollaborativePipeline, load_router, train_router, TrainConfig
    from routedvlm import run_labelling, LabelConfig, RoutedVLMError

The code lives in the folders pyproject maps into this namespace: `routedvlm.router`, `routedvlm.inference`,
`routedvlm.data`, `routedvlm.training`, `routedvlm.errors` (see docs/DESIGN.md).
"""
from __future__ import annotations

import importlib
import pkgutil

# the subpackages live in other folders (pyproject's package-dir): an installed copy's folder, when this one is found
# first on sys.path (a checkout's root), is searched too
__path__ = pkgutil.extend_path(__path__, __name__)

_LAZY = {
    "RoutedVLM": "routedvlm.inference",
    "VLM": "routedvlm.inference",
    "CollaborativePipeline": "routedvlm.inference",
    "MutualVerification": "routedvlm.inference",
    "load_router": "routedvlm.router",
    "Router": "routedvlm.router",
    "train_router": "routedvlm.training.pipeline",
    "TrainConfig": "routedvlm.training.config",
    "run_labelling": "routedvlm.data.labelling",
    "LabelConfig": "routedvlm.data.labelling",
    "RoutedVLMError": "routedvlm.errors",
}
__all__ = sorted(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *__all__})
