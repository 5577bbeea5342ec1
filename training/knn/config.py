"""The `knn` router type's train-router settings: none of its own. k and the smoothing prior are chosen by
leave-one-out log loss on the training rows (trainer.py's K_GRID and PRIOR_GRID), so there is nothing to set.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..settings import RouterSettings


@dataclass
class KNNConfig(RouterSettings):
    """P(correct) per strategy from the k most similar training prompts (k and the prior chosen by leave-one-out)."""
