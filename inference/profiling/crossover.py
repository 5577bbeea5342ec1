"""Crossover analysis: when does a larger model answering in N tokens finish before a smaller one producing M?

N*(M) for every (smaller, larger) pair of a profile, from the fitted latency models of `latency_model.py`.
"""
from __future__ import annotations

from .latency_model import LatencyModel, models_by_size


def crossover_tokens(small: LatencyModel, large: LatencyModel, m_tokens: int, small_ref: dict, large_ref: dict,
                     cap: int = 1_000_000) -> int | None:
    """N*(M): the most output tokens the large model can produce and still finish no later than the small model
    producing `m_tokens`, each on its own reference input (`{"prefill_tokens", "image_tokens"}`).

    None when even one large-model token is slower. Binary search over the (monotone) fitted end-to-end latency.
    """
    def e2e(lm, ref, n):
        return lm.end_to_end_ms(n, int(ref["prefill_tokens"]), int(ref["image_tokens"]))

    budget = e2e(small, small_ref, m_tokens)
    if e2e(large, large_ref, 1) > budget:
        return None
    lo, hi = 1, 2
    while hi < cap and e2e(large, large_ref, hi) <= budget:
        lo, hi = hi, hi * 2
    hi = min(hi, cap)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if e2e(large, large_ref, mid) <= budget else (lo, mid)
    return lo if e2e(large, large_ref, hi) > budget else hi


def crossover_points(profile: dict, m_values=None) -> list[dict]:
    """For each pair (smaller, larger) by parameters and each M: {small, large, m, small_ms, large_tokens}.

    M defaults to the output-token settings above 1. `large_tokens` is N*(M) (None: the larger model is slower even
    for one token).
    """
    names = models_by_size(profile)
    if m_values is None:
        m_values = [m for m in profile["settings"]["output_tokens"] if m > 1]
    out = []
    for i, small in enumerate(names):
        for large in names[i + 1:]:
            lm_s, lm_l = LatencyModel.load(profile, small), LatencyModel.load(profile, large)
            ref_s, ref_l = profile["models"][small]["reference"], profile["models"][large]["reference"]
            for m in m_values:
                n_star = crossover_tokens(lm_s, lm_l, int(m), ref_s, ref_l)
                small_ms = lm_s.end_to_end_ms(int(m), ref_s["prefill_tokens"], ref_s["image_tokens"])
                out.append({"small": small, "large": large, "m": int(m), "small_ms": small_ms, "large_tokens": n_star})
    return out
