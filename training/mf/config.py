"""The `mf` router type's train-router settings: none of its own. The rank and the L2 penalty are chosen by 3-fold
cross-validation on the training rows (trainer.py's RANK_GRID and L2_GRID), so there is nothing to set.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..settings import RouterSettings


@dataclass
class MFConfig(RouterSettings):
    """Matrix factorisation: P(correct) = sigmoid(<v_s, W z> + b_s) over the standardised features z (rank and L2
    chosen by cross-validation on the training rows)."""
