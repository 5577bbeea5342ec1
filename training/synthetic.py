"""Synthetic labels with a known ground truth, in the real labels.parquet schema (tests, benchmark, demo input).

The process (every number is a module constant, so tests can reason about it):
- each sample has a latent difficulty `z ~ U(0, 1)` and a latent type `t`: "lookup" (60 %) or "reasoning";
- strategy `s` is correct iff `z + e < CAPACITY[s][t]` with `e ~ N(0, NOISE)` drawn per sample and strategy,
  so harder samples need more kept reasoning tokens and reasoning-type samples defeat `large_direct`;
- latencies follow a token cost model (ms): the small model needs `R = 60 + 400 z` reasoning tokens, the
  large model `50 + 350 z`; `transfer_K` = small reasoning of min(K, R) tokens + a large short answer with
  K kept tokens; `escalate_K` = the same minus the large model's cached image+question prefix; every
  latency gets multiplicative jitter (lognormal, sigma 0.08);
- features: `feat__prompt__*` see `z` through noise (question length ~ 8 + 40 z + N(0, 4), distinct colours)
  and `t` through a 95 %-accurate flag (`asks_number`); `feat__large_direct__*` see the margin between
  large_direct's capacity and `z` (its answer confidence, noise ~0.05 in z units);
  `feat__small_direct__first_token_entropy` = 2.5 z + N(0, 0.15); the
  `agree` feature is the real agreement of the two direct answers (wrong answers agree 1 time in 4).
So the best policy is learnable: accept `large_direct` when its confidence is high, otherwise escalate to
the smallest K whose capacity covers the (estimated) difficulty.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from routedvlm.data.labels.schema import compute_labels, write_labels
from routedvlm.router.strategies import DEFAULT_K_GRID, default_strategies, parse_strategy

NOISE = 0.04
LOOKUP_SHARE = 0.6
# capacity per strategy: (lookup, reasoning); transfer_K capacities are interpolated by K below.
BASE_CAPACITY = {
    "small_direct": (0.45, 0.15),
    "large_direct": (0.85, 0.35),
    "small_reason": (0.50, 0.55),
    "large_reason": (0.96, 0.95),
    "transfer_all": (0.93, 0.90),
}
SMALL_MS_PER_TOKEN, LARGE_MS_PER_TOKEN = 6.0, 25.0
SMALL_DIRECT_MS, LARGE_DIRECT_MS, LARGE_CONTINUE_MS, PREFILL_MS_PER_KEPT_TOKEN = 50.0, 180.0, 40.0, 0.3


def capacity(strategy: str) -> tuple[float, float]:
    """(lookup, reasoning) capacity of a strategy; transfer_K grows with log2(K) up to transfer_all's."""
    st = parse_strategy(strategy)
    if st.id in BASE_CAPACITY:
        return BASE_CAPACITY[st.id]
    step = min(np.log2(st.keep_tokens) - 4.0, 4.0)  # K=16 -> 0, K=256 -> 4
    return (min(0.86 + 0.015 * step, 0.93), min(0.50 + 0.095 * step, 0.90))


def _latencies(z: np.ndarray, strategies: list[str], rng: np.random.Generator) -> dict[str, np.ndarray]:
    n = len(z)
    small_tokens = 60 + 400 * z
    large_tokens = 50 + 350 * z
    jit = lambda: np.exp(rng.normal(0.0, 0.08, n))  # noqa: E731
    out = {
        "small_direct": SMALL_DIRECT_MS * jit(),
        "large_direct": LARGE_DIRECT_MS * jit(),
        "small_reason": (SMALL_DIRECT_MS + SMALL_MS_PER_TOKEN * small_tokens) * jit(),
        "large_reason": (LARGE_DIRECT_MS + LARGE_MS_PER_TOKEN * large_tokens) * jit(),
    }
    for s in strategies:
        st = parse_strategy(s)
        if not st.is_transfer:
            continue
        kept = small_tokens if st.keep_tokens is None else np.minimum(st.keep_tokens, small_tokens)
        small = SMALL_DIRECT_MS + SMALL_MS_PER_TOKEN * kept
        j = jit()
        out[s] = (small + LARGE_DIRECT_MS + PREFILL_MS_PER_KEPT_TOKEN * kept) * j
        key = "escalate_all" if st.keep_tokens is None else f"escalate_{st.keep_tokens}"
        out[key] = (small + LARGE_CONTINUE_MS + PREFILL_MS_PER_KEPT_TOKEN * kept) * j
    return out


def _answers(correct: np.ndarray, ref: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    wrong = ref + rng.choice([-2, -1, 1, 2], size=len(ref))
    return np.where(correct, ref, wrong)


def _features(z, t, cap_ld, correct_ld, correct_sd, ans_ld, ans_sd, rng) -> dict[str, np.ndarray]:
    n = len(z)
    flag = np.where(rng.random(n) < 0.95, t, 1 - t)
    margin_ld = cap_ld - z
    return {
        "feat__prompt__question_words": np.round(8 + 40 * z + rng.normal(0, 4, n)).clip(3),
        "feat__prompt__option_count": rng.choice([0.0, 4.0], size=n),
        "feat__prompt__asks_number": flag.astype(float),
        "feat__prompt__image_distinct_colors": np.round(2 + 8 * z + rng.normal(0, 1.5, n)).clip(1),
        "feat__large_direct__logprob_mean": -np.log1p(np.exp(-8 * margin_ld + rng.normal(0, 0.4, n))),
        "feat__large_direct__first_token_entropy": np.clip(1.5 - 3 * margin_ld + rng.normal(0, 0.3, n), 0, None),
        "feat__large_direct__answer_tokens": (2 + rng.poisson(1 + 2 * (~correct_ld), n)).astype(float),
        "feat__small_direct__first_token_entropy": np.clip(2.5 * z + rng.normal(0, 0.15, n), 0, None),
        "feat__small_direct__logprob_mean": -np.log1p(np.exp(rng.normal(0, 1, n) + 3 * (~correct_sd))),
        "feat__large_direct+small_direct__agree": (ans_ld == ans_sd).astype(float),
    }


def make_synthetic_labels(
    n: int = 2000, seed: int = 0, k_grid=DEFAULT_K_GRID, datasets=("synth-charts", "synth-counting")
) -> pd.DataFrame:
    """A labels DataFrame of `n` rows in schema version 1 (see the module docstring for the process)."""
    rng = np.random.default_rng(seed)
    strategies = default_strategies(k_grid)
    z = rng.random(n)
    t = (rng.random(n) >= LOOKUP_SHARE).astype(int)  # 1 = reasoning
    ref = rng.integers(0, 100, n)
    df = pd.DataFrame({
        "sample_id": [f"synth-{seed}-{i:06d}" for i in range(n)],
        "dataset": np.asarray(datasets, dtype=object)[rng.integers(0, len(datasets), n)],
        "task_type": "numeric",
        "question": [f"What is the value of chart {i}?" for i in range(n)],
        "reference": [json.dumps([str(r)]) for r in ref],
    })
    lat = _latencies(z, strategies, rng)
    answers, correct = {}, {}
    for s in strategies:
        cap = np.where(t == 1, capacity(s)[1], capacity(s)[0])
        correct[s] = z + rng.normal(0, NOISE, n) < cap
        answers[s] = _answers(correct[s], ref, rng)
        df[f"answer__{s}"] = answers[s].astype(str)
        df[f"correct__{s}"] = correct[s]
        df[f"latency_ms__{s}"] = lat[s]
        df[f"output_tokens__{s}"] = (3 + (60 + 400 * z) * ("reason" in s)).astype(int)
    for key in [k for k in lat if k.startswith("escalate_")]:
        df[f"latency_ms__{key}"] = lat[key]
    cap_ld = np.where(t == 1, capacity("large_direct")[1], capacity("large_direct")[0])
    feats = _features(z, t, cap_ld, correct["large_direct"], correct["small_direct"],
                      answers["large_direct"], answers["small_direct"], rng)
    for name, values in feats.items():
        df[name] = values.astype(float)
    df["label"] = compute_labels(df, strategies).to_numpy()
    return df


def synthetic_metadata(df: pd.DataFrame, seed: int, k_grid=DEFAULT_K_GRID) -> dict:
    """The `routedvlm` parquet metadata for synthetic labels (models are named as synthetic)."""
    return {
        "models": {
            "small": {"name": "synthetic-small", "revision": None, "dtype": "n/a", "device": "n/a"},
            "large": {"name": "synthetic-large", "revision": None, "dtype": "n/a", "device": "n/a"},
        },
        "selector": "prefix",
        "k_grid": list(k_grid),
        "prompts": {},
        "prompt_template": {"name": "none", "text": None, "instructions": None},
        "scorers": {d: "exact_match" for d in sorted(df["dataset"].unique())},
        "execution": "synthetic",
        "generator": {"module": "routedvlm.training.synthetic", "seed": seed, "rows": len(df)},
        "created_at": "1970-01-01T00:00:00+00:00",
    }


def write_synthetic_labels(path, n: int = 2000, seed: int = 0, k_grid=DEFAULT_K_GRID):
    """Generate and write a synthetic labels.parquet (schema-valid, with metadata); returns the path."""
    df = make_synthetic_labels(n, seed, k_grid)
    return write_labels(df, path, synthetic_metadata(df, seed, k_grid))
