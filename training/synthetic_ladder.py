"""Synthetic labels of a three-model ladder (`small`, `mid`, `large`) with a known ground truth, in the labels schema
(version 2 metadata `ladder`): the ladder's tests, and the ladder-against-its-best-pair comparison, before real
ladder labels exist.

The process extends training/synthetic.py's (same latent difficulty `z ~ U(0, 1)` and type `t`, same rule: `s` is
correct iff `z + e < CAPACITY[s][t]`, `e ~ N(0, NOISE)`), with a middle model that is useful: `mid_direct` costs
about half of `large_direct` (100 vs 180 ms) and is right on lookup samples up to z = 0.75, where `small_direct`
stops at 0.45 and `large_direct` at 0.85. Transfers run between every two models: capacity grows with log2(K) up to
the `_all` transfer's; `mid -> large` beats `small -> large` at every K, `small -> mid` is the cheap one. Latencies:
a model reasons `R_m` tokens (small 60 + 400 z, mid 55 + 370 z, large 50 + 350 z) at 6 / 12 / 25 ms per token;
`transfer_a_b_K` = `a` reasoning min(K, R_a) tokens + `b`'s short answer with them (prefill 0.3 ms per kept token);
its escalate column replaces `b`'s direct cost by `b`'s continuation from its cached prefix (mid 25, large 40 ms).
Features: the prompt features of synthetic.py, per model `feat__<m>_direct__{logprob_mean, first_token_entropy,
answer_tokens}` reading the margin `capacity - z` through noise, and `feat__<b>_direct+<a>_direct__agree` for
every two models (wrong answers agree 1 time in 4).
"""
from __future__ import annotations

import itertools
import json

import numpy as np
import pandas as pd

from routedvlm.data.labels.schema import compute_labels, escalate_col, write_labels
from routedvlm.router.strategies import ladder_strategies, parse_strategy

from .synthetic import LOOKUP_SHARE, NOISE, _answers

LADDER = ("small", "mid", "large")
K_GRID = (16, 64, 256)
DIRECT_CAPACITY = {"small": (0.45, 0.15), "mid": (0.75, 0.30), "large": (0.85, 0.35)}
REASON_CAPACITY = {"small": (0.50, 0.55), "mid": (0.80, 0.80), "large": (0.96, 0.95)}
# (lookup at K=16, reasoning at K=16, lookup of `_all`, reasoning of `_all`) per transfer pair
TRANSFER_CAPACITY = {("small", "mid"): (0.77, 0.45, 0.82, 0.75), ("small", "large"): (0.86, 0.50, 0.93, 0.90),
                     ("mid", "large"): (0.88, 0.60, 0.94, 0.92)}
DIRECT_MS = {"small": 50.0, "mid": 100.0, "large": 180.0}
CONTINUE_MS = {"small": 20.0, "mid": 25.0, "large": 40.0}
MS_PER_TOKEN = {"small": 6.0, "mid": 12.0, "large": 25.0}
REASON_TOKENS = {"small": (60, 400), "mid": (55, 370), "large": (50, 350)}  # a + b z
PREFILL_MS_PER_KEPT_TOKEN = 0.3


def ladder_capacity(strategy: str) -> tuple[float, float]:
    """(lookup, reasoning) capacity of a ladder strategy (module docstring)."""
    st = parse_strategy(strategy)
    if st.mode == "direct":
        return DIRECT_CAPACITY[st.model]
    if st.mode == "reason":
        return REASON_CAPACITY[st.model]
    lo16, re16, lo_all, re_all = TRANSFER_CAPACITY[(st.source, st.model)]
    if st.keep_tokens is None:
        return lo_all, re_all
    step = min(max(np.log2(st.keep_tokens) - 4.0, 0.0), 4.0) / 4.0  # K=16 -> 0, K=256 -> 1
    return lo16 + 0.8 * step * (lo_all - lo16), re16 + 0.8 * step * (re_all - re16)


def _tokens(model: str, z: np.ndarray) -> np.ndarray:
    a, b = REASON_TOKENS[model]
    return a + b * z


def _latencies(z: np.ndarray, strategies: list[str], rng: np.random.Generator) -> dict[str, np.ndarray]:
    n = len(z)
    jit = lambda: np.exp(rng.normal(0.0, 0.08, n))  # noqa: E731
    out = {}
    for s in strategies:
        st = parse_strategy(s)
        m = st.model
        if st.mode == "direct":
            out[s] = DIRECT_MS[m] * jit()
        elif st.mode == "reason":
            out[s] = (DIRECT_MS[m] + MS_PER_TOKEN[m] * _tokens(m, z)) * jit()
        else:
            src = st.source
            kept = _tokens(src, z) if st.keep_tokens is None else np.minimum(st.keep_tokens, _tokens(src, z))
            source_ms = DIRECT_MS[src] + MS_PER_TOKEN[src] * kept + PREFILL_MS_PER_KEPT_TOKEN * kept
            j = jit()
            out[s] = (source_ms + DIRECT_MS[m]) * j
            out[escalate_col(s)[len("latency_ms__"):]] = (source_ms + CONTINUE_MS[m]) * j
    return out


def _features(z, t, correct, answers, rng) -> dict[str, np.ndarray]:
    n = len(z)
    flag = np.where(rng.random(n) < 0.95, t, 1 - t)
    out = {
        "feat__prompt__question_words": np.round(8 + 40 * z + rng.normal(0, 4, n)).clip(3),
        "feat__prompt__option_count": rng.choice([0.0, 4.0], size=n),
        "feat__prompt__asks_number": flag.astype(float),
        "feat__prompt__image_distinct_colors": np.round(2 + 8 * z + rng.normal(0, 1.5, n)).clip(1),
    }
    for m in LADDER:
        cap = np.where(t == 1, DIRECT_CAPACITY[m][1], DIRECT_CAPACITY[m][0])
        margin, ok = cap - z, correct[f"{m}_direct"]
        out[f"feat__{m}_direct__logprob_mean"] = -np.log1p(np.exp(-8 * margin + rng.normal(0, 0.4, n)))
        out[f"feat__{m}_direct__first_token_entropy"] = np.clip(1.5 - 3 * margin + rng.normal(0, 0.3, n), 0, None)
        out[f"feat__{m}_direct__answer_tokens"] = (2 + rng.poisson(1 + 2 * (~ok), n)).astype(float)
    for a, b in itertools.combinations(LADDER, 2):
        out[f"feat__{b}_direct+{a}_direct__agree"] = (answers[f"{b}_direct"] == answers[f"{a}_direct"]).astype(float)
    return out


def make_ladder_labels(n: int = 2000, seed: int = 0, k_grid=K_GRID,
                       datasets=("synth-charts", "synth-counting")) -> pd.DataFrame:
    """A labels DataFrame of `n` rows of the three-model ladder (module docstring)."""
    rng = np.random.default_rng(seed)
    strategies = ladder_strategies(LADDER, k_grid)
    z = rng.random(n)
    t = (rng.random(n) >= LOOKUP_SHARE).astype(int)  # 1 = reasoning
    ref = rng.integers(0, 100, n)
    df = pd.DataFrame({
        "sample_id": [f"synth-ladder-{seed}-{i:06d}" for i in range(n)],
        "dataset": np.asarray(datasets, dtype=object)[rng.integers(0, len(datasets), n)],
        "task_type": "numeric",
        "question": [f"What is the value of chart {i}?" for i in range(n)],
        "reference": [json.dumps([str(r)]) for r in ref],
    })
    lat = _latencies(z, strategies, rng)
    answers, correct, cols = {}, {}, {}
    for s in strategies:
        cap = np.where(t == 1, ladder_capacity(s)[1], ladder_capacity(s)[0])
        correct[s] = z + rng.normal(0, NOISE, n) < cap
        answers[s] = _answers(correct[s], ref, rng)
        st = parse_strategy(s)
        reasons = st.mode == "reason"
        cols.update({f"answer__{s}": answers[s].astype(str), f"correct__{s}": correct[s], f"latency_ms__{s}": lat[s],
                     f"output_tokens__{s}": (3 + _tokens(st.model, z) * reasons).astype(int)})
    cols.update({f"latency_ms__{k}": v for k, v in lat.items() if k.startswith("escalate_")})
    cols.update({k: v.astype(float) for k, v in _features(z, t, correct, answers, rng).items()})
    df = pd.concat([df, pd.DataFrame(cols)], axis=1)
    df["label"] = compute_labels(df, strategies).to_numpy()
    return df


def ladder_metadata(df: pd.DataFrame, seed: int, k_grid=K_GRID) -> dict:
    """The `routedvlm` metadata of synthetic ladder labels: `ladder` and `models` keyed by alias (schema version 2)."""
    return {
        "ladder": list(LADDER),
        "models": {a: {"name": f"synthetic-{a}", "revision": None, "dtype": "n/a", "device": "n/a"} for a in LADDER},
        "selector": "prefix", "k_grid": list(k_grid), "prompts": {},
        "prompt_template": {"name": "none", "text": None, "instructions": None},
        "scorers": {d: "exact_match" for d in sorted(df["dataset"].unique())},
        "execution": "synthetic",
        "generator": {"module": "routedvlm.training.synthetic_ladder", "seed": seed, "rows": len(df)},
        "created_at": "1970-01-01T00:00:00+00:00",
    }


def write_ladder_labels(path, n: int = 2000, seed: int = 0, k_grid=K_GRID):
    """Generate and write synthetic ladder labels (schema-valid, with metadata); returns the path."""
    df = make_ladder_labels(n, seed, k_grid)
    return write_labels(df, path, ladder_metadata(df, seed, k_grid))
