"""A router with one LightGBM binary model per candidate strategy, predicting P(correct) from features.

Models are stored as LightGBM text files (`model_<strategy>.txt`); a strategy whose training labels were
all-correct or all-wrong may be a constant probability (`policy.params["constants"]`). Never imports torch.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .base import Router
from .errors import RouterError
from .policy import Policy


def model_file(strategy: str) -> str:
    return f"model_{strategy}.txt"


class LightGBMRouter(Router):
    """`boosters` maps strategy -> lightgbm.Booster; strategies without a booster need a constant in
    `policy.params["constants"]` ({strategy: probability})."""

    def __init__(self, policy: Policy, boosters: dict | None = None):
        boosters = dict(boosters or {})
        constants = {s: float(v) for s, v in dict(policy.params.get("constants", {})).items()}
        covered = set(boosters) | set(constants)
        missing = [s for s in policy.strategies if s not in covered]
        extra = sorted(covered - set(policy.strategies))
        if missing or extra:
            raise RouterError(
                f"LightGBMRouter needs a booster or a constant for every strategy: missing {missing}, "
                f"not candidates {extra}. Candidates are {policy.strategies}."
            )
        n = len(policy.features)
        wrong = {s: b.num_feature() for s, b in boosters.items() if b.num_feature() != n}
        if wrong:
            raise RouterError(
                f"LightGBM models must use the policy's {n} features {policy.features}; "
                f"these use another number: {wrong}. Retrain with the same feature list."
            )
        self.boosters = boosters
        self.constants = constants
        super().__init__(policy)

    def _matrix(self, features) -> np.ndarray:
        try:
            return features[self.policy.features].to_numpy(dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise RouterError(f"Features must be numeric (NaN allowed): {exc}") from None

    def predict_proba(self, features):
        import pandas as pd

        self.check_features(features.columns, self.policy.features)
        x = self._matrix(features)
        out = {}
        for s in self.policy.strategies:
            if s in self.boosters:
                out[s] = self.boosters[s].predict(x, num_threads=1)
            else:
                out[s] = np.full(len(x), self.constants[s])
        return pd.DataFrame(out, index=features.index, columns=self.policy.strategies)

    def _proba_row(self, row: dict) -> dict[str, float]:
        try:
            x = np.array([[float(_num(row[f])) for f in self.policy.features]], dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise RouterError(f"Features must be numeric (NaN allowed): {exc}") from None
        out = {}
        for s in self.policy.strategies:
            b = self.boosters.get(s)
            out[s] = float(b.predict(x, num_threads=1)[0]) if b is not None else self.constants[s]
        return out

    def _save_files(self, directory: Path) -> None:
        files = {}
        for s, booster in self.boosters.items():
            booster.save_model(str(directory / model_file(s)))
            files[s] = model_file(s)
        self.policy.params["model_files"] = files
        self.policy.params["constants"] = dict(self.constants)

    @classmethod
    def _from_folder(cls, policy: Policy, directory: Path) -> "LightGBMRouter":
        import lightgbm

        files = dict(policy.params.get("model_files", {}))
        absent = sorted(f for f in files.values() if not (directory / f).is_file())
        if absent:
            raise RouterError(
                f"The router folder {str(directory)!r} lacks model file(s) {absent} listed in policy.json. "
                "Copy the whole folder, or re-export it with train-router."
            )
        boosters = {}
        for s, f in files.items():
            try:
                boosters[s] = lightgbm.Booster(model_file=str(directory / f))
            except lightgbm.basic.LightGBMError as exc:
                raise RouterError(f"{directory / f} is not a readable LightGBM text model ({exc}).") from None
        return cls(policy, boosters)


def _num(v):
    return float("nan") if v is None else v
