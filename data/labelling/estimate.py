"""The labelling cost printed before a run starts: the strategy grid, model calls per sample (per model), and with
`--estimate-only` the wall time of one sample labelled on the first selected sample, scaled to the run.

Calls are counted as `run_many` makes them (inference/shared_run.py): a source model reasons once (+ one call that
closes its reasoning when it must answer and stopped early: counted, an upper bound), the cheapest model's direct
answer is one call, an answering model above it prefills its image+question prefix once and continues it for its
direct answer, each transfer it answers (the attention selector adds a scoring pass per K) and its own reasoning;
a served model (`<url>#<id>`) sends each transfer two or three requests (a seed of its namespace, the two-stage
call, and the cold call when wall clocks are measured). Prefill-only splits of a prompt cache are not counted.
"""
from __future__ import annotations

import time

from routedvlm.router.strategies import alias_rank, parse_strategy


def calls_per_sample(strategies, aliases, selector: str = "prefix", remote=(), measure_cold: bool = True) -> dict:
    """{alias: model calls per sample} of one `run_many` over `strategies` (see the module docstring)."""
    strats = [parse_strategy(s) for s in strategies]
    kinds = {s.id for s in strats}
    transfers = {(s.source, s.keep_tokens, s.model) for s in strats if s.is_transfer}
    calls = dict.fromkeys(aliases, 0)
    first = aliases[0]
    sources = [m for m in aliases if any(a == m for a, _, _ in transfers) or (m == first and f"{m}_reason" in kinds)]
    for m in sources:
        calls[m] += 1 + (f"{m}_reason" in kinds)
    calls[first] += f"{first}_direct" in kinds
    for m in aliases[1:]:
        incoming = [k for a, k, b in transfers if b == m]
        if f"{m}_direct" in kinds or incoming:
            per_transfer = (2 + measure_cold) if m in remote else 1
            prefix = 0 if m in remote else 1
            attention = sum(k is not None for k in incoming) if selector == "attention" else 0
            calls[m] += prefix + 1 + per_transfer * len(incoming) + attention
        if f"{m}_reason" in kinds and m not in sources:
            calls[m] += 2
    return calls


def grid_counts(strategies) -> dict:
    """How many strategies of each mode, and the transfer pairs."""
    strats = [parse_strategy(s) for s in strategies]
    pairs = sorted({(s.source, s.model) for s in strats if s.is_transfer}, key=lambda p: (alias_rank(p[1]), alias_rank(p[0])))
    return {"direct": sum(s.mode == "direct" for s in strats), "reason": sum(s.mode == "reason" for s in strats),
            "transfer": sum(s.is_transfer for s in strats), "pairs": pairs}


def _remote_aliases(cfg) -> tuple:
    from routedvlm.inference.sides.kinds import side_kind

    return tuple(a for a, spec in cfg.ladder_specs().items() if side_kind(spec).remote)


def describe_grid(cfg) -> str:
    """The grid and the model calls per sample of a run (printed before it starts)."""
    aliases, n = cfg.aliases, len(cfg.aliases)
    counts = grid_counts(cfg.strategies)
    calls = calls_per_sample(cfg.strategies, aliases, cfg.selector, _remote_aliases(cfg), cfg.cost is None)
    full = 2 * n + n * (n - 1) // 2 * (len(cfg.k_grid or ()) + 1)
    pairs = ", ".join(f"{a}:{b}" for a, b in counts["pairs"]) or "none"
    per_model = ", ".join(f"{a} {c}" for a, c in calls.items())
    budget = cfg.max_reason_tokens * sum(1 for a in aliases if calls[a] and _reasons(cfg.strategies, a))
    return (f"labelling {n} models {list(aliases)}: {len(cfg.strategies)} strategies ({counts['direct']} direct, "
            f"{counts['reason']} reasoning, {counts['transfer']} transfers over pairs {pairs}; K grid "
            f"{list(cfg.k_grid or ())}; the full grid of {n} models is {full}); per sample about "
            f"{sum(calls.values())} model calls ({per_model}) decoding at most {budget} reasoning tokens "
            "(--estimate-only times one sample)")


def _reasons(strategies, alias) -> bool:
    return any((s.mode == "reason" and s.model == alias) or (s.is_transfer and s.source == alias)
               for s in map(parse_strategy, strategies))


def model_ms(results, stage_ms=None) -> float:
    """Model time one `run_many` spent: every call once (records sharing a `call` id, or equal otherwise, are one
    call; the costliest of them counts, so a reasoning record truncated at K for one transfer does not hide the full
    run), priced by `stage_ms(model, record)` (default: measured vision + prefill + decode ms)."""
    from .latency import wall_clock_stage_ms

    cost = stage_ms or wall_clock_stage_ms
    calls = {}
    for res in results.values():
        for r in res.trace:
            key = r.get("call") or (r["model"], r["stage"], r.get("prefill_tokens"), r.get("decode_tokens"),
                                    r.get("prefill_ms"), r.get("decode_ms"))
            calls[key] = max(calls.get(key, 0.0), float(cost(r["model"], r)))
    return sum(calls.values())


def estimate_run(cfg) -> str:
    """Label the first selected sample once (nothing is stored) and scale its wall time (and, with --cost, its model
    time priced by the profile) to the run."""
    from .config import every_side
    from .models import load_pipeline, stage_cost
    from .per_sample import _image
    from .sources import open_source

    _, keyed, load = open_source(cfg)
    mine = [(p, sid) for p, sid in keyed if p % cfg.shard_count == cfg.shard_index]
    if not mine:
        return "estimate: no sample is selected (check --limit, --shard and the data set); nothing to label"
    t0 = time.perf_counter()
    pipe, _ = load_pipeline(cfg)
    try:
        pipe.start()
        load_s = time.perf_counter() - t0
        position, sample_id = mine[0]
        sample = load(position, sample_id)
        t0 = time.perf_counter()
        results = pipe.run_many(_image(sample), sample.prompt, list(cfg.strategies))
        sample_s = time.perf_counter() - t0
    finally:
        pipe.close()
    parallel = int(cfg.concurrency) if every_side(cfg, "remote") else 1
    workers = " (divide by the Ray workers)" if cfg.ray else ""
    total = sample_s * len(mine) / parallel
    text = (f"estimate: loading the models took {load_s:.1f} s; one sample ({sample_id}) took {sample_s:.2f} s "
            f"(the first sample also warms the models up: an upper bound); {len(mine)} selected sample(s) at "
            f"{parallel} in flight: about {total / 60:.1f} min{workers}")
    if cfg.cost is not None:
        priced = model_ms(results, stage_cost(cfg, "cost-model")[0]) / 1000
        text += (f"; priced by {cfg.cost}: {priced:.2f} s of model time per sample, about "
                 f"{priced * len(mine) / parallel / 60:.1f} min{workers}")
    return text
