"""Deterministic train / calibration / test split of a labels table, stratified by `dataset`.

Rows are ordered by `sample_id` before shuffling, so the split depends only on the content and the seed,
not on the row order of the file.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from routedvlm.errors import TrainingError

MIN_ROWS = {"train": 40, "calibration": 20, "test": 20}


@dataclass
class Split:
    train: pd.DataFrame
    calibration: pd.DataFrame
    test: pd.DataFrame

    def sizes(self) -> dict[str, int]:
        return {"train": len(self.train), "calibration": len(self.calibration), "test": len(self.test)}


def check_enough_rows(df: pd.DataFrame, failed: int = 0) -> None:
    """TrainingError unless `df` has the rows the three splits need (checked before anything else)."""
    need = sum(MIN_ROWS.values())
    if len(df) < need:
        dropped = f" (after dropping {failed} failed sample(s))" if failed else ""
        raise TrainingError(
            f"The labels have {len(df)} usable row(s){dropped}; train-router needs at least {need} "
            f"(train {MIN_ROWS['train']}, calibration {MIN_ROWS['calibration']}, test {MIN_ROWS['test']}). "
            "Label more samples (routedvlm label --limit N)."
        )


def split_labels(df: pd.DataFrame, calib_fraction: float = 0.2, test_fraction: float = 0.2, seed: int = 0) -> Split:
    """Split per dataset (each dataset keeps its share in every part); raises TrainingError if a part is too small."""
    check_enough_rows(df)
    rng = np.random.default_rng(seed)
    parts = {"train": [], "calibration": [], "test": []}
    ordered = df.sort_values("sample_id", kind="stable")
    groups = ordered.groupby("dataset", sort=True) if "dataset" in df.columns else [("all", ordered)]
    for _, g in groups:
        idx = g.index.to_numpy()[rng.permutation(len(g))]
        n_test = int(round(len(idx) * test_fraction))
        n_cal = int(round(len(idx) * calib_fraction))
        parts["test"].append(idx[:n_test])
        parts["calibration"].append(idx[n_test:n_test + n_cal])
        parts["train"].append(idx[n_test + n_cal:])
    out = {k: df.loc[np.concatenate(v)] for k, v in parts.items()}
    small = {k: len(v) for k, v in out.items() if len(v) < MIN_ROWS[k]}
    if small:
        raise TrainingError(
            f"Too few rows for the splits: {small} (minimum {MIN_ROWS}) from {len(df)} labelled rows. "
            "Label more samples or change --calib-fraction / --test-fraction."
        )
    return Split(**out)
