"""The transform a `lightgbm-pca` router applies before its boosters: many columns (an embedding's meaning features)
→ a few principal components, `reduce_<i>` = (x − mean) · component_i, fitted on the training rows and stored in the
artifact as `reduce.safetensors` (`mean` (m,), `components` (k, m)); the columns it reads are listed in
`policy.params["reduce"]["columns"]`. The same `Reduction.apply` builds the boosters' training matrix and the runtime
one. A missing value counts as the training mean (it adds nothing to any component).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from routedvlm.errors import RouterError

REDUCE_FILE = "reduce.safetensors"


def reduced_name(i: int) -> str:
    return f"reduce_{i:02d}"


class Reduction:
    """`columns` (m names) → `len(components)` values; `mean` (m,), `components` (k, m)."""

    def __init__(self, columns, mean, components):
        self.columns = list(columns)
        self.mean = np.ascontiguousarray(mean, dtype=np.float64)
        self.components = np.ascontiguousarray(components, dtype=np.float64)
        m = len(self.columns)
        if (m < 1 or self.mean.shape != (m,) or self.components.ndim != 2 or self.components.shape[1] != m
                or len(self.components) < 1):
            raise RouterError(f"The reduction must map {m} columns (>= 1) with mean ({m},) and components (k >= 1, {m}); "
                              f"got mean {self.mean.shape}, components {self.components.shape}. Retrain with "
                              "train-router --router lightgbm-pca.")
        if not (np.isfinite(self.mean).all() and np.isfinite(self.components).all()):
            raise RouterError("The reduction holds NaN or infinite values. Retrain with train-router --router lightgbm-pca.")
        self.names = [reduced_name(i) for i in range(len(self.components))]

    def apply(self, x: np.ndarray) -> np.ndarray:
        """(rows, m) values of `columns` → (rows, k) components."""
        centred = np.asarray(x, dtype=np.float64) - self.mean
        return np.where(np.isnan(centred), 0.0, centred) @ self.components.T

    def model_matrix(self, features: list[str], x: np.ndarray) -> np.ndarray:
        """(rows, features) → (rows, kept features + components): the columns not reduced, in order, then the
        components (the boosters' input)."""
        idx = {f: i for i, f in enumerate(features)}
        kept = [idx[f] for f in features if f not in set(self.columns)]
        return np.concatenate([x[:, kept], self.apply(x[:, [idx[c] for c in self.columns]])], axis=1)

    def model_names(self, features: list[str]) -> list[str]:
        return [f for f in features if f not in set(self.columns)] + self.names

    def spec(self) -> dict:
        """What policy.json records (`params["reduce"]`)."""
        return {"file": REDUCE_FILE, "columns": list(self.columns), "names": list(self.names)}

    def save(self, directory: Path) -> None:
        from safetensors.numpy import save_file

        save_file({"mean": self.mean, "components": self.components}, str(Path(directory) / REDUCE_FILE))

    @classmethod
    def from_bytes(cls, columns, data: bytes) -> "Reduction":
        from safetensors.numpy import load

        arrays = load(data)
        return cls(columns, arrays.get("mean"), arrays.get("components"))


def fit_pca(x: np.ndarray, columns, k: int) -> Reduction:
    """The first `k` principal components of the rows `x` ((rows, m), NaN: the column mean), signs fixed so each
    component's largest loading is positive (the same rows give the same transform)."""
    mean = np.nanmean(x, axis=0)
    mean = np.where(np.isnan(mean), 0.0, mean)
    centred = np.where(np.isnan(x), 0.0, x - mean)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    comps = vt[:max(1, min(k, len(vt)))]
    signs = np.sign(comps[np.arange(len(comps)), np.abs(comps).argmax(axis=1)])
    return Reduction(columns, mean, comps * np.where(signs == 0, 1.0, signs)[:, None])
