"""A k-nearest-neighbour router (RouteLLM's similarity-weighted family): P(correct | strategy) for a request is the
smoothed share of its k most similar training prompts that the strategy got right.

Similarity: cosine between feature vectors standardised with the training rows' mean and spread (a missing value
counts as the mean). Smoothing: `(hits + prior * base_rate) / (k + prior)`, so a neighbourhood of 5 never says 0 or 1.
Artifact: policy.json + `bank.safetensors` (numpy arrays: `x` the training features, `y` their correctness per
strategy in policy order, `mean`, `std`). Deciding needs numpy and safetensors only (no torch, no pickle).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from routedvlm.errors import RouterError, RouterLoadError
from ..base import Router
from ..policy import Policy

BANK_FILE = "bank.safetensors"


class KNNRouter(Router):
    """`bank`: {x: (n, d), y: (n, strategies), mean: (d,), std: (d,)}; `policy.params["knn"]`: {k, prior}."""

    def __init__(self, policy: Policy, bank: dict):
        knn = dict(policy.params.get("knn") or {})
        x, y, mean, std = (np.ascontiguousarray(bank.get(key), dtype=np.float32)  # C order: safetensors writes the buffer
                           for key in ("x", "y", "mean", "std"))
        n, d, s = len(x), len(policy.features), len(policy.strategies)
        problems = []
        if x.shape != (n, d) or n < 1:
            problems.append(f"x must be (rows >= 1, {d} features); got {x.shape}")
        if y.shape != (n, s):
            problems.append(f"y must be ({n} rows, {s} strategies); got {y.shape}")
        if mean.shape != (d,) or std.shape != (d,) or not (std > 0).all():
            problems.append(f"mean and std must be ({d},) with std > 0; got {mean.shape}, {std.shape}")
        k, prior = knn.get("k"), knn.get("prior", 1.0)
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            problems.append(f"params.knn.k must be a positive integer; got {k!r}")
        if not isinstance(prior, (int, float)) or not prior >= 0:
            problems.append(f"params.knn.prior must be a number >= 0; got {prior!r}")
        if problems:
            raise RouterError("KNNRouter: " + "; ".join(problems) + ". Retrain with train-router --router knn.")
        self.x, self.y, self.mean, self.std = x, y, mean, std
        self.k, self.prior = min(k, n), float(prior)
        self.base_rate = y.mean(axis=0)
        self._bank = _unit((x - mean) / std)
        super().__init__(policy)

    def _matrix(self, features) -> np.ndarray:
        try:
            x = features[self.policy.features].to_numpy(dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise RouterError(f"Features must be numeric (NaN allowed): {exc}") from None
        return np.where(np.isnan(x), self.mean, x)

    def predict_proba(self, features):
        import pandas as pd

        self.check_features(features.columns, self.policy.features)
        p = self.proba_matrix(self._matrix(features))
        return pd.DataFrame(p, index=features.index, columns=self.policy.strategies)

    def proba_matrix(self, x: np.ndarray, exclude_self: bool = False) -> np.ndarray:
        """(rows, strategies) P(correct) for raw feature rows `x`; `exclude_self` drops each row's own bank entry
        (leave-one-out on the training rows, which the trainer uses to choose k)."""
        return knn_proba(self.similarities(x, exclude_self), self.y, self.base_rate, self.k, self.prior)

    def similarities(self, x: np.ndarray, exclude_self: bool = False) -> np.ndarray:
        """(rows, bank rows) cosine similarities of raw feature rows `x` to the bank."""
        sims = _unit((x - self.mean) / self.std) @ self._bank.T
        if exclude_self:
            np.fill_diagonal(sims, -np.inf)
        return sims

    def _save_files(self, directory: Path) -> None:
        from safetensors.numpy import save_file

        save_file({"x": self.x, "y": self.y, "mean": self.mean, "std": self.std}, str(directory / BANK_FILE))
        self.policy.params["bank_file"] = BANK_FILE

    @classmethod
    def model_files(cls, policy: Policy) -> list[str]:
        return [BANK_FILE]

    @classmethod
    def _from_folder(cls, policy: Policy, directory: Path) -> "KNNRouter":
        from safetensors import SafetensorError
        from safetensors.numpy import load

        from ..integrity import read_verified

        try:
            bank = load(read_verified(policy, directory, BANK_FILE))
        except (SafetensorError, ValueError) as exc:
            raise RouterLoadError(f"{directory / BANK_FILE} is not a readable safetensors file ({exc}).") from None
        try:
            return cls(policy, bank)
        except RouterError as exc:
            raise RouterLoadError(f"{directory}: {exc}") from None


def knn_proba(sims: np.ndarray, y: np.ndarray, base_rate: np.ndarray, k: int, prior: float,
              order: np.ndarray | None = None) -> np.ndarray:
    """(rows, strategies): `(hits among the k most similar + prior * base_rate) / (k + prior)`; `order` reuses an
    argsort of `-sims` (rows, most similar first). Excluded entries (-inf) are never among the k."""
    k = max(1, min(k, int(np.isfinite(sims).sum(axis=1).min())))
    nearest = (order if order is not None else np.argsort(-sims, axis=1, kind="stable"))[:, :k]
    hits = y[nearest].sum(axis=1)
    return ((hits + prior * base_rate) / (k + prior)).astype(np.float64)


def _unit(z: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(z, axis=1, keepdims=True)
    return z / np.where(norm > 0, norm, 1.0)
