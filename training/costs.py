"""The cost model (router_contract.md): what a policy pays before deciding plus the chosen strategy's increment.

- `one-shot`: nothing is paid before deciding; choosing `s` costs `latency_ms__s`.
- `cascade`: `large_direct` is paid first (and `small_direct` too when a feature needs it, summed as if
  sequential, conservatively); then `large_direct` costs 0, `small_direct` costs 0 if paid else its own
  latency, `transfer_K` costs `latency_ms__escalate_K` (the small model's reasoning plus the large model's
  continuation from its cached prefix; `escalate_all` for `transfer_all`), any other `s` costs `latency_ms__s`.
A labels file without an `escalate` column for some K falls back to the one-stage `latency_ms__transfer_K`.

On a ladder (labels with a model beyond small and large) a cascade climbs: it pays the `<m>_direct` stages in
`paid_stages` (the ones its features need, cheapest first; summed as if sequential), then takes one strategy. The
realised latency is what was paid plus the chosen strategy's increment: 0 for a paid `<m>_direct`; for a transfer
`a->b` whose target's `b_direct` was paid, `escalate_col(t)` (`b` continues from its cached prefix); else the
strategy's standalone `latency_ms__s`. On a pair this is exactly the rule above (every pair transfer goes to large).
A pair's cascade always pays `large_direct` (added when missing); a ladder's pays exactly its `paid_stages`.
"""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from routedvlm.errors import ConfigError, TrainingError, one_of
from routedvlm.router.strategies import LARGE_DIRECT, SMALL_DIRECT, parse_strategy

log = logging.getLogger(__name__)
MODES = ("cascade", "one-shot")


def label_strategies(df: pd.DataFrame) -> list[str]:
    """Strategies present in the labels (a `correct__` and a `latency_ms__` column), in file order."""
    return [c[len("correct__"):] for c in df.columns
            if c.startswith("correct__") and f"latency_ms__{c[len('correct__'):]}" in df.columns]


def _col(df: pd.DataFrame, name: str) -> np.ndarray:
    if name not in df.columns:
        raise TrainingError(f"The labels have no column {name!r}, which the cost model needs.")
    return df[name].to_numpy(dtype=float)


def _escalate_column(strategy: str) -> str:
    from routedvlm.data.labels.schema import escalate_col

    return escalate_col(parse_strategy(strategy).id)


def is_ladder(df: pd.DataFrame) -> bool:
    """Whether the labels run a model beyond the pair's two (a ladder of three or more)."""
    return any(set(parse_strategy(s).models) - {"small", "large"} for s in label_strategies(df))


def _check(mode: str, paid_stages, df: pd.DataFrame | None = None) -> list[str]:
    if mode not in MODES:
        raise ConfigError(f"`mode` must be {one_of(MODES)}; got {mode!r}.")
    paid = list(paid_stages or [])
    pair_shape = set(paid) <= {SMALL_DIRECT} and not (paid and df is not None and is_ladder(df))
    if mode == "cascade" and LARGE_DIRECT not in paid and pair_shape:
        paid = [LARGE_DIRECT, *paid]
    if mode == "one-shot" and paid:
        raise ConfigError(f"A one-shot policy pays no stage before deciding; got paid_stages={paid}.")
    return paid


def paid_latency(df: pd.DataFrame, mode: str, paid_stages=()) -> np.ndarray:
    """Latency paid on every row before the decision (sum of the paid stages' latencies)."""
    paid = _check(mode, paid_stages, df)
    total = np.zeros(len(df))
    for stage in paid:
        total = total + _col(df, f"latency_ms__{stage}")
    return total


def incremental_cost(df: pd.DataFrame, strategy: str, mode: str, paid_stages=()) -> np.ndarray:
    """Per-row latency of obtaining `strategy`'s answer after the paid stages."""
    paid = _check(mode, paid_stages, df)
    st = parse_strategy(strategy)
    if st.id in paid:
        return np.zeros(len(df))
    if st.is_transfer and f"{st.model}_direct" in paid:
        name = _escalate_column(st.id)
        if name in df.columns:
            return _col(df, name)
        log.warning("no %s column; using the one-stage latency of %s for its escalation cost", name, st.id)
    return _col(df, f"latency_ms__{st.id}")


def incremental_costs(df: pd.DataFrame, strategies, mode: str, paid_stages=()) -> pd.DataFrame:
    """DataFrame (rows of `df`, one column per strategy) of incremental costs in ms."""
    return pd.DataFrame({s: incremental_cost(df, s, mode, paid_stages) for s in strategies}, index=df.index)


def expected_costs(df: pd.DataFrame, strategies, mode: str, paid_stages=()) -> dict[str, float]:
    """Mean incremental cost per strategy: the decision rule's constants (computed on the training split)."""
    inc = incremental_costs(df, strategies, mode, paid_stages)
    return {s: float(inc[s].mean()) for s in strategies}


def realized_latency(df: pd.DataFrame, strategies_chosen, mode: str, paid_stages=()) -> np.ndarray:
    """Per-row realized latency: paid stages + the chosen strategy's incremental cost."""
    chosen = _chosen(df, strategies_chosen)
    total = paid_latency(df, mode, paid_stages)
    for s in pd.unique(chosen):
        mask = chosen == s
        total[mask] += incremental_cost(df, s, mode, paid_stages)[mask]
    return total


def realized_correct(df: pd.DataFrame, strategies_chosen) -> np.ndarray:
    """Per-row correctness of the chosen strategy's answer."""
    chosen = _chosen(df, strategies_chosen)
    out = np.zeros(len(df), dtype=bool)
    for s in pd.unique(chosen):
        mask = chosen == s
        out[mask] = df[f"correct__{s}"].to_numpy(dtype=bool)[mask]
    return out


def _chosen(df: pd.DataFrame, strategies_chosen) -> np.ndarray:
    chosen = np.asarray(strategies_chosen, dtype=object)
    if len(chosen) != len(df):
        raise TrainingError(f"Got {len(chosen)} chosen strategies for {len(df)} rows.")
    return chosen


class Outcomes:
    """Correctness and realized latency of every strategy on every row, precomputed for fast sweeps."""

    def __init__(self, df: pd.DataFrame, strategies, mode: str, paid_stages=()):
        self.strategies = list(strategies)
        self._pos = {s: i for i, s in enumerate(self.strategies)}
        self.latency = (incremental_costs(df, self.strategies, mode, paid_stages).to_numpy()
                        + paid_latency(df, mode, paid_stages)[:, None])
        self.correct = np.stack([df[f"correct__{s}"].to_numpy(dtype=bool) for s in self.strategies], axis=1)
        self._rows = np.arange(len(df))

    def of(self, strategies_chosen) -> tuple[np.ndarray, np.ndarray]:
        """(correct, latency) per row for the chosen strategy ids (all must be in `strategies`)."""
        chosen = np.asarray(strategies_chosen, dtype=object)
        idx = np.empty(len(chosen), dtype=int)
        for s in pd.unique(chosen):  # a handful of distinct ids: one vectorised compare each
            if s not in self._pos:
                raise TrainingError(f"Chosen strategy {s!r} is outside {self.strategies}.")
            idx[chosen == s] = self._pos[s]
        return self.correct[self._rows, idx], self.latency[self._rows, idx]
