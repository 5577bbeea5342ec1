"""Choose the decision threshold tau on held-out labels so that the policy meets the user's target.

- accuracy target `a`: the required accuracy is `a` x the best single candidate strategy's accuracy on the
  same split. A tau meets it when its accuracy minus `margin` binomial standard errors, acc - margin *
  sqrt(acc (1 - acc) / n) on the n calibration rows, is >= the required accuracy (margin 0: the bare
  accuracy; the default 1.0 keeps a small calibration split from picking a tau that meets the target by luck).
  Among the taus that meet it, the one with the lowest mean realized latency wins (ties: higher accuracy,
  then lower tau).
- latency target `L`: among the taus whose mean realized latency is <= L, the most accurate wins (ties:
  lower latency).
If no tau meets the target, the closest one is returned with `met=False` (most accurate, resp. fastest).
`pick_operating_point` is generic over any swept parameter, so the baselines are calibrated the same way.
"""
from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from routedvlm.router.decision import choose
from routedvlm.router.errors import ConfigError

from .config import DEFAULT_CALIBRATION_MARGIN
from .costs import Outcomes

log = logging.getLogger(__name__)


@dataclass
class OperatingPoint:
    param: float  # tau (or a baseline's threshold)
    accuracy: float
    mean_latency_ms: float
    required: float  # required accuracy, or the latency budget
    met: bool
    margin: float = 0.0  # standard errors subtracted from the accuracy before comparing (accuracy targets)
    n: int = 0  # rows the accuracy was measured on (0: unknown, only with margin 0)

    @property
    def accuracy_lower_bound(self) -> float:
        """accuracy - margin x its binomial standard error: what was compared with `required`."""
        return _lower_bound(self.accuracy, self.margin, self.n)

    def to_dict(self) -> dict:
        return {**asdict(self), "accuracy_lower_bound": self.accuracy_lower_bound}


def _lower_bound(accuracy, margin: float, n: int):
    if not margin:
        return accuracy
    return accuracy - margin * np.sqrt(np.clip(accuracy * (1 - accuracy), 0.0, None) / n)


def tau_grid(p: pd.DataFrame, n: int = 200) -> np.ndarray:
    """Candidate taus: a uniform grid on [0, 1] plus quantiles of the predicted probabilities."""
    values = p.to_numpy(dtype=float).ravel()
    values = values[np.isfinite(values)]
    qs = np.quantile(values, np.linspace(0, 1, n)) if len(values) else np.array([])
    return np.unique(np.clip(np.concatenate([np.linspace(0, 1, n + 1), qs]), 0.0, 1.0))


def sweep_tau(p: pd.DataFrame, costs: dict, fallback: str, df: pd.DataFrame, mode: str, paid_stages,
              taus=None) -> pd.DataFrame:
    """Accuracy and mean realized latency of the decision rule at every tau (columns param, accuracy,
    mean_latency_ms)."""
    taus = tau_grid(p) if taus is None else np.asarray(taus, dtype=float)
    outcomes = Outcomes(df, list(dict.fromkeys([*p.columns, fallback])), mode, paid_stages)
    rows = []
    for tau in taus:
        ok, lat = outcomes.of(choose(p, costs, float(tau), fallback))
        rows.append((float(tau), ok.mean(), lat.mean()))
    return pd.DataFrame(rows, columns=["param", "accuracy", "mean_latency_ms"])


def best_single_accuracy(df: pd.DataFrame, strategies) -> float:
    return max(float(df[f"correct__{s}"].mean()) for s in strategies)


def pick_operating_point(points: pd.DataFrame, target: dict, reference_accuracy: float, margin: float = 0.0,
                         n: int = 0) -> OperatingPoint:
    """Pick a row of `points` (param, accuracy, mean_latency_ms) per the module docstring; `margin` standard
    errors of an accuracy measured on `n` rows (accuracy targets only; latency budgets ignore it)."""
    kind, value = target["kind"], float(target["value"])
    if not (margin >= 0 and np.isfinite(margin)):
        raise ConfigError(f"`calibration_margin` must be a finite number >= 0 (standard errors); got {margin!r}.")
    if margin and n < 1:
        raise ConfigError(f"a calibration margin of {margin} standard errors needs the number of calibration rows "
                          f"`n` >= 1; got {n!r}. Pass n=len(calibration split), or margin=0.")
    pts = points.assign(neg_acc=-points["accuracy"])
    if kind == "accuracy":
        required = value * reference_accuracy
        ok = pts[_lower_bound(pts["accuracy"].to_numpy(float), margin, n) >= required - 1e-12]
        order = ["mean_latency_ms", "neg_acc", "param"]
        pool = ok if len(ok) else pts.sort_values(["neg_acc", "mean_latency_ms"]).head(1)
    else:
        required = value
        ok = pts[pts["mean_latency_ms"] <= value]
        order = ["neg_acc", "mean_latency_ms", "param"]
        pool = ok if len(ok) else pts.sort_values(["mean_latency_ms", "neg_acc"]).head(1)
    best = pool.sort_values(order, kind="stable").iloc[0]
    return OperatingPoint(float(best["param"]), float(best["accuracy"]), float(best["mean_latency_ms"]),
                          float(required), bool(len(ok)), float(margin) if kind == "accuracy" else 0.0, int(n))


def calibrate_tau(p: pd.DataFrame, costs: dict, fallback: str, df: pd.DataFrame, mode: str, paid_stages,
                  target: dict, strategies, margin: float = DEFAULT_CALIBRATION_MARGIN) -> OperatingPoint:
    """The tau meeting `target` on `df` (the calibration split) at the lowest latency, with `margin`
    standard errors of headroom on an accuracy target (module docstring)."""
    points = sweep_tau(p, costs, fallback, df, mode, paid_stages)
    op = pick_operating_point(points, target, best_single_accuracy(df, strategies), margin, len(df))
    if not op.met:
        log.warning("no tau meets the target %s with a margin of %g standard errors on the %d calibration rows; "
                    "using tau=%.3f (accuracy %.3f, %.0f ms)", target, margin, len(df), op.param, op.accuracy,
                    op.mean_latency_ms)
    return op
