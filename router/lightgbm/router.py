"""A router with one LightGBM binary model per candidate strategy, predicting P(correct) from features.

Models are stored as LightGBM text files (`model_<strategy>.txt`); a strategy whose training labels were
all-correct or all-wrong may be a constant probability (`policy.params["constants"]`). Never imports torch.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from routedvlm.errors import RouterError, RouterLoadError
from ..base import Router
from ..policy import Policy
from .fast import fast_rows
from .trees import tree_problem


def model_file(strategy: str) -> str:
    return f"model_{strategy}.txt"


class LightGBMRouter(Router):
    """`boosters` maps strategy -> lightgbm.Booster; strategies without a booster need a constant in
    `policy.params["constants"]` ({strategy: probability})."""

    bounded_decision = True  # a walk of trees checked to be trees (trees.py): as many steps as the model has nodes

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
        bad = {s: v for s, v in constants.items() if not 0.0 <= v <= 1.0}  # NaN fails too
        if bad:
            raise RouterError(f"policy.params['constants'] must be probabilities in [0, 1]. Got {bad}.")
        n = len(policy.features)
        wrong = {s: b.num_feature() for s, b in boosters.items() if b.num_feature() != n}
        if wrong:
            raise RouterError(
                f"LightGBM models must use the policy's {n} features {policy.features}; "
                f"these use another number: {wrong}. Retrain with the same feature list."
            )
        misnamed = {s: b.feature_name() for s, b in boosters.items()
                    if not _generic(b.feature_name()) and b.feature_name() != list(policy.features)}
        if misnamed:  # a reordered list would feed every feature into another's splits
            s, names = next(iter(sorted(misnamed.items())))
            raise RouterError(f"The LightGBM model of {s!r} was trained on the features {names}, in that order, but "
                              f"policy.json lists {policy.features}. Re-export the router with train-router.")
        for s, b in sorted(boosters.items()):  # the trees LightGBM parsed, as it writes them back (no tree walk)
            problem = tree_problem(b.model_to_string(num_iteration=-1))
            if problem:
                raise RouterError(f"The LightGBM model of {s!r} is damaged: {problem}. Re-export the router with "
                                  "train-router.")
        self.boosters = boosters
        self.constants = constants
        super().__init__(policy)
        self._modelled = [s for s in policy.strategies if s in boosters]
        self._fast = fast_rows([boosters[s] for s in self._modelled], n) if boosters else None

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
        return self._proba_plan(row, self._decision_plan())

    def _proba_plan(self, row: dict, plan) -> dict[str, float]:
        if self._fast is not None:  # one C call for every booster (router/lightgbm/fast.py)
            try:
                probs = self._fast.predict(plan.values(row))  # ints and floats as they are
            except TypeError:  # None, numeric strings: converted one by one
                probs = self._fast.predict(self._values(row))
            out = dict(zip(self._modelled, probs))
            if len(out) == len(self.policy.strategies):
                return out
            return {s: out[s] if s in out else self.constants[s] for s in self.policy.strategies}
        x = np.array([self._values(row)], dtype=np.float64)
        out = {}
        for s in self.policy.strategies:
            b = self.boosters.get(s)
            out[s] = float(b.predict(x, num_threads=1)[0]) if b is not None else self.constants[s]
        return out

    def _values(self, row: dict) -> list[float]:
        try:
            return [float(_num(row[f])) for f in self.policy.features]
        except (TypeError, ValueError) as exc:
            raise RouterError(f"Features must be numeric (NaN allowed): {exc}") from None

    def _save_files(self, directory: Path) -> None:
        files = {}
        for s, booster in self.boosters.items():
            booster.save_model(str(directory / model_file(s)))
            files[s] = model_file(s)
        self.policy.params["model_files"] = files
        self.policy.params["constants"] = dict(self.constants)

    @classmethod
    def model_files(cls, policy: Policy) -> list[str]:
        files = policy.params.get("model_files", {})
        if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
            raise RouterLoadError(f"policy.json params.model_files must map strategy ids to file names. Got {files!r:.200}.")
        return list(files.values())

    @classmethod
    def _check_unverified(cls, directory: Path, files: list[str], why: str | None = None) -> None:
        from .child_check import UNHASHED, lightgbm_child

        lightgbm_child([directory / f for f in files], why or UNHASHED)

    @classmethod
    def _from_folder(cls, policy: Policy, directory: Path) -> "LightGBMRouter":
        import lightgbm

        from ..integrity import read_verified

        if policy.format_version >= 2:  # a damaged file whose digest was re-computed must not abort or hang us
            from .child_check import HASHED

            cls._check_unverified(directory, sorted(set(policy.params.get("model_files", {}).values())), HASHED)
        boosters = {}
        for s, f in policy.params.get("model_files", {}).items():
            try:
                boosters[s] = lightgbm.Booster(model_str=read_verified(policy, directory, f).decode())
            except (lightgbm.basic.LightGBMError, UnicodeDecodeError) as exc:
                raise RouterLoadError(f"{directory / f} is not a readable LightGBM text model ({exc}).") from None
        try:
            return cls(policy, boosters)
        except RouterLoadError:
            raise
        except RouterError as exc:  # the models disagree with policy.json
            raise RouterLoadError(f"{directory}: {exc}") from None


def _generic(names) -> bool:
    """Whether LightGBM feature names are its defaults (a model trained on an unnamed matrix)."""
    return all(name == f"Column_{i}" for i, name in enumerate(names))


def _num(v):
    return float("nan") if v is None else v
