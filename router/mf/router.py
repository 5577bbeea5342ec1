"""A matrix-factorisation router: each strategy s has an embedding v_s (rank r), each prompt the projection W·z of
its standardised features z (missing values count as the training mean, z = 0); P(correct | prompt, s) =
σ(<v_s, W·z> + b_s). RouteLLM's MF router scores a (prompt, model) pair the same way, with a learned prompt
projection shared by the models; here the "prompt embedding" is whatever features the policy lists (length
statistics, `feat__prompt__meaning_<i>`, the small model's state).

Artifact: policy.json + `mf.safetensors` (numpy arrays: `mean`, `std` (d,), `proj` W (r, d), `emb` V (strategies, r)
in policy order, `bias` b (strategies,)). Deciding needs numpy and safetensors only (no torch, no pickle).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from routedvlm.errors import RouterError, RouterLoadError
from ..base import Router
from ..policy import Policy

MF_FILE = "mf.safetensors"
KEYS = ("mean", "std", "proj", "emb", "bias")


class MFRouter(Router):
    """`arrays`: {mean: (d,), std: (d,), proj: (r, d), emb: (strategies, r), bias: (strategies,)}."""

    def __init__(self, policy: Policy, arrays: dict):
        mean, std, proj, emb, bias = (np.ascontiguousarray(arrays.get(k), dtype=np.float64) for k in KEYS)
        d, s = len(policy.features), len(policy.strategies)
        r = proj.shape[0] if proj.ndim == 2 else -1
        problems = []
        if mean.shape != (d,) or std.shape != (d,) or not (std > 0).all():
            problems.append(f"mean and std must be ({d},) with std > 0; got {mean.shape}, {std.shape}")
        if proj.ndim != 2 or r < 1 or proj.shape[1] != d:
            problems.append(f"proj must be (rank >= 1, {d} features); got {proj.shape}")
        if emb.shape != (s, r):
            problems.append(f"emb must be ({s} strategies, rank {r}); got {emb.shape}")
        if bias.shape != (s,):
            problems.append(f"bias must be ({s},); got {bias.shape}")
        if not problems and not all(np.isfinite(a).all() for a in (mean, std, proj, emb, bias)):
            problems.append("the arrays hold NaN or infinite values")
        if problems:
            raise RouterError("MFRouter: " + "; ".join(problems) + ". Retrain with train-router --router mf.")
        self.mean, self.std, self.proj, self.emb, self.bias = mean, std, proj, emb, bias
        super().__init__(policy)

    def _matrix(self, features) -> np.ndarray:
        try:
            return features[self.policy.features].to_numpy(dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise RouterError(f"Features must be numeric (NaN allowed): {exc}") from None

    def predict_proba(self, features):
        import pandas as pd

        self.check_features(features.columns, self.policy.features)
        p = self.proba_matrix(self._matrix(features))
        return pd.DataFrame(p, index=features.index, columns=self.policy.strategies)

    def _proba_row(self, row: dict) -> dict[str, float]:
        try:
            x = np.array([[np.nan if row[f] is None else float(row[f]) for f in self.policy.features]])
        except (TypeError, ValueError) as exc:
            raise RouterError(f"Features must be numeric (NaN allowed): {exc}") from None
        return dict(zip(self.policy.strategies, map(float, self.proba_matrix(x)[0])))

    def proba_matrix(self, x: np.ndarray) -> np.ndarray:
        """(rows, strategies) P(correct) for raw feature rows `x` (NaN: the training mean)."""
        return mf_proba(x, self.mean, self.std, self.proj, self.emb, self.bias)

    def _save_files(self, directory: Path) -> None:
        from safetensors.numpy import save_file

        save_file({k: np.ascontiguousarray(getattr(self, k)) for k in KEYS}, str(directory / MF_FILE))
        self.policy.params["mf_file"] = MF_FILE

    @classmethod
    def model_files(cls, policy: Policy) -> list[str]:
        return [MF_FILE]

    @classmethod
    def _from_folder(cls, policy: Policy, directory: Path) -> "MFRouter":
        from safetensors import SafetensorError
        from safetensors.numpy import load

        from ..integrity import read_verified

        try:
            arrays = load(read_verified(policy, directory, MF_FILE))
        except (SafetensorError, ValueError) as exc:
            raise RouterLoadError(f"{directory / MF_FILE} is not a readable safetensors file ({exc}).") from None
        try:
            return cls(policy, arrays)
        except RouterError as exc:
            raise RouterLoadError(f"{directory}: {exc}") from None


def standardise(x: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """(x - mean) / std with NaN -> 0 (the training mean)."""
    z = (np.asarray(x, dtype=np.float64) - mean) / std
    return np.where(np.isnan(z), 0.0, z)


def mf_proba(x, mean, std, proj, emb, bias) -> np.ndarray:
    """σ(<v_s, W·z> + b_s) for every row of `x` and strategy s: (rows, strategies)."""
    logits = (standardise(x, mean, std) @ proj.T) @ emb.T + bias
    return 1.0 / (1.0 + np.exp(-np.clip(logits, -40, 40)))
