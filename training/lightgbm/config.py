"""The `lightgbm` router type's train-router settings (`--num-boost-round`, `--cv-folds`, `--num-leaves`,
`--learning-rate`; flags generated from the fields, training/settings.py). The same settings shape every LightGBM
fit a trainer makes: the one beside a probe, a ladder's sub-pairs and the `--calib-fraction auto` simulation.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..settings import RouterSettings, setting


@dataclass
class LightGBMConfig(RouterSettings):
    """One LightGBM model per candidate strategy on tabular features (also fitted beside a probe and for a ladder's
    sub-pairs)."""

    num_boost_round: int = setting(200, "LightGBM boosting rounds per strategy")
    cv_folds: int = setting(5, "LightGBM: choose each strategy's boosting rounds (at most --num-boost-round) by this "
                               "many stratified cross-validation folds of the training rows, early stopping on log "
                               "loss; 0 = always --num-boost-round")
    num_leaves: int = setting(15, "LightGBM leaves per tree")
    learning_rate: float = setting(0.05, "LightGBM learning rate")

    def problems(self) -> list[str]:
        out = []
        for name in ("num_boost_round", "num_leaves"):
            if not getattr(self, name) >= 1 or (name == "num_leaves" and self.num_leaves < 2):
                out.append(f"`{name}` must be a positive integer (num_leaves >= 2); got {getattr(self, name)!r}")
        if not (isinstance(self.cv_folds, int) and (self.cv_folds == 0 or self.cv_folds >= 2)):
            out.append(f"`cv_folds` must be 0 (off) or an integer >= 2; got {self.cv_folds!r}")
        if not 0.0 < self.learning_rate <= 1.0:
            out.append(f"`learning_rate` must be in (0, 1]; got {self.learning_rate!r}")
        return out
