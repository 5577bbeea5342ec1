"""A router with one LightGBM binary model per candidate strategy, predicting P(correct) from features.

Models are stored as LightGBM text files (`model_<strategy>.txt`); a strategy whose training labels were
all-correct or all-wrong may be a constant probability (`policy.params["constants"]`). Never imports torch.
A `lightgbm-pca` router also holds a `Reduction` (reduce.py, `reduce.safetensors`): its boosters read the features it
does not reduce, then the reduced components.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from routedvlm.errors import RouterError, RouterLoadError
from ..base import Router
from ..policy import Policy
from .fast import fast_rows
from .reduce import Reduction
from .trees import tree_problem


def model_file(strategy: str) -> str:
    return f"model_{strategy}.txt"


class LightGBMRouter(Router):
    """`boosters` maps strategy -> lightgbm.Booster; strategies without a booster need a constant in
    `policy.params["constants"]` ({strategy: probability}). `reduction`: the transform before the boosters, if any."""

    bounded_decision = True  # a walk of trees checked to be trees (trees.py): as many steps as the model has nodes

    def __init__(self, policy: Policy, boosters: dict | None = None, reduction: Reduction | None = None):
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
        missing_cols = [c for c in (reduction.columns if reduction else []) if c not in policy.features]
        if missing_cols:
            raise RouterError(f"The reduction reads columns {missing_cols[:5]} that are not among the policy's features. "
                              "Retrain with train-router --router lightgbm-pca.")
        model_names = reduction.model_names(list(policy.features)) if reduction else list(policy.features)
        n = len(model_names)
        wrong = {s: b.num_feature() for s, b in boosters.items() if b.num_feature() != n}
        if wrong:
            raise RouterError(
                f"LightGBM models must use the policy's {n} features {model_names}; "
                f"these use another number: {wrong}. Retrain with the same feature list."
            )
        misnamed = {s: b.feature_name() for s, b in boosters.items()
                    if not _generic(b.feature_name()) and b.feature_name() != model_names}
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
        self.reduction = reduction
        if reduction is not None:
            policy.params["reduce"] = reduction.spec()
        super().__init__(policy)
        self._modelled = [s for s in policy.strategies if s in boosters]
        self._fast = fast_rows([boosters[s] for s in self._modelled], n) if boosters else None

    def _matrix(self, features) -> np.ndarray:
        """The boosters' input matrix: the policy's features, reduced where the router holds a reduction."""
        try:
            x = features[self.policy.features].to_numpy(dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise RouterError(f"Features must be numeric (NaN allowed): {exc}") from None
        return self.reduction.model_matrix(list(self.policy.features), x) if self.reduction else x

    def predict_proba(self, features):
        import pandas as pd

        self.check_features(features.columns, self.policy.features)
        x = self._matrix(features)
        return pd.DataFrame(self.predict_matrix(x), index=features.index, columns=self.policy.strategies)

    def predict_matrix(self, x: np.ndarray) -> dict:
        """{strategy: P(correct) per row} for the boosters' input matrix `x` (`_matrix`)."""
        return {s: self.boosters[s].predict(x, num_threads=1) if s in self.boosters else np.full(len(x), self.constants[s])
                for s in self.policy.strategies}

    def _proba_row(self, row: dict) -> dict[str, float]:
        return self._proba_plan(row, self._decision_plan())

    def _proba_plan(self, row: dict, plan) -> dict[str, float]:
        if self.reduction is not None:  # the components first, then the boosters (their fast path when there is one)
            x = self.reduction.model_matrix(list(self.policy.features), np.array([self._values(row)], dtype=np.float64))
            if self._fast is None:
                return {s: float(v[0]) for s, v in self.predict_matrix(x).items()}
            out = dict(zip(self._modelled, self._fast.predict(x[0].tolist())))
            return {s: out[s] if s in out else self.constants[s] for s in self.policy.strategies}
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
        if self.reduction is not None:
            self.reduction.save(directory)

    @classmethod
    def model_files(cls, policy: Policy) -> list[str]:
        files = policy.params.get("model_files", {})
        if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
            raise RouterLoadError(f"policy.json params.model_files must map strategy ids to file names. Got {files!r:.200}.")
        return list(files.values()) + ([reduce_spec(policy)["file"]] if policy.params.get("reduce") else [])

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
        reduction = None
        if policy.params.get("reduce"):
            spec = reduce_spec(policy)
            try:
                reduction = Reduction.from_bytes(spec["columns"], read_verified(policy, directory, spec["file"]))
            except RouterError as exc:
                raise RouterLoadError(f"{directory}: {exc}") from None
            except Exception as exc:  # noqa: BLE001 - safetensors' own errors: a damaged file
                raise RouterLoadError(f"{directory / spec['file']} is not a readable safetensors file ({exc}).") from None
        boosters = {}
        for s, f in policy.params.get("model_files", {}).items():
            try:
                boosters[s] = lightgbm.Booster(model_str=read_verified(policy, directory, f).decode())
            except (lightgbm.basic.LightGBMError, UnicodeDecodeError) as exc:
                raise RouterLoadError(f"{directory / f} is not a readable LightGBM text model ({exc}).") from None
        try:
            return cls(policy, boosters, reduction)
        except RouterLoadError:
            raise
        except RouterError as exc:  # the models disagree with policy.json
            raise RouterLoadError(f"{directory}: {exc}") from None


def reduce_spec(policy: Policy) -> dict:
    """policy.params["reduce"], checked: {file, columns, names}."""
    spec = policy.params.get("reduce")
    if not (isinstance(spec, dict) and isinstance(spec.get("file"), str) and isinstance(spec.get("columns"), list)
            and spec["columns"] and all(isinstance(c, str) for c in spec["columns"])):
        raise RouterLoadError(f"policy.json params.reduce must be {{'file': str, 'columns': [str, ...], 'names': [...]}}. "
                              f"Got {spec!r:.200}.")
    return spec


def _generic(names) -> bool:
    """Whether LightGBM feature names are its defaults (a model trained on an unnamed matrix)."""
    return all(name == f"Column_{i}" for i, name in enumerate(names))


def _num(v):
    return float("nan") if v is None else v
