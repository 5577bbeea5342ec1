"""The models of a labelling run: every side of the ladder loaded once (`load_pipeline`), and how stage times are
priced (`stage_cost`: wall clock, or a fitted latency model with --cost)."""
from __future__ import annotations

from routedvlm.router.strategies import DEFAULT_K_GRID

from .config import LabelConfig


def load_pipeline(cfg: LabelConfig):
    """(CollaborativePipeline with every model of the ladder loaded, resolved device)."""
    from routedvlm.inference import CollaborativePipeline
    from routedvlm.inference.sides import load_side
    from routedvlm.inference.sides.local import resolve_device, set_threads

    from .config import every_side

    set_threads(cfg.threads)
    meaning_of(cfg)  # registers the meaning features label_sample computes (in every worker process)
    device = "remote" if every_side(cfg, "remote") else resolve_device(cfg.device)
    reasoners, loaded = cfg.ladder_reasoners(), {}
    sides = []
    for alias, spec in cfg.ladder_specs().items():
        key = (str(spec), reasoners.get(alias)) if cfg.is_ladder else alias  # one copy of a model two rungs name alike
        if key not in loaded:
            side = loaded[key] = load_side(spec, reasoner=reasoners.get(alias), device=device, dtype=cfg.dtype)
            # measured latencies (no --cost): one-stage transfers are also timed cold; priced ones send no request
            # that exists only to measure
            side.measure_cold, side.priced = cfg.cost is None, cfg.cost is not None
        sides.append(loaded[key])
    pipe = CollaborativePipeline(
        sides=sides, selector=cfg.selector, k_grid=cfg.k_grid or DEFAULT_K_GRID, max_direct_tokens=cfg.max_new_tokens,
        max_reason_tokens=cfg.max_reason_tokens, min_new_tokens=cfg.min_new_tokens, min_reason_tokens=cfg.min_reason_tokens,
    )
    state_of(cfg, pipe)  # the small model's state features: captured and registered, or unregistered
    return pipe, device


def state_of(cfg: LabelConfig, pipe=None):
    """The small VLM's state features of `cfg.state_dims` (None when 0); with `pipe`, switched on for its small side
    (registered for label_sample, capture on) — or, without state features, taken out of the feature registry."""
    from routedvlm.inference.encoders.state import StateFeatures, enable_state, unregister_state

    if not cfg.state_dims:
        if pipe is not None:
            unregister_state()
        return None
    state = StateFeatures.from_checkpoint(cfg.ladder_specs()["small"], dims=cfg.state_dims)
    if pipe is not None:
        enable_state(state, pipe.small)
    return state


def stage_cost(cfg: LabelConfig, source: str):
    """(stage_ms callable or None for wall clock, metadata about the latency source `source`)."""
    if cfg.cost is None:
        return None, {"latency_source": source}
    from routedvlm.inference.profiling.latency_model import cost_stage_fn

    named, specs = cfg.ladder_cost_models(), cfg.ladder_specs()
    ladder = {a: (named.get(a), spec) for a, spec in specs.items()} if cfg.is_ladder else None  # a pair's metadata
    return cost_stage_fn(cfg.cost, small=named.get("small"), large=named.get("large"), small_path=specs["small"],
                         large_path=specs["large"], ladder=ladder)


_MEANING: dict = {}
PROBE_PROMPTS = ("What is shown in the image?", "How many red objects are there? Answer with a number.",
                 "Is the largest bar taller than the second largest one? Answer yes or no.")


def meaning_of(cfg: LabelConfig):
    """The meaning features of `cfg.encoder` (loaded once per process and registered; None without an encoder), its
    cost measured on a few probe prompts."""
    if not cfg.encoder:
        return None
    key = (cfg.encoder, cfg.encoder_dims)
    if key not in _MEANING:
        from routedvlm.inference.encoders import load_meaning

        meaning = load_meaning(cfg.encoder, cfg.encoder_dims)
        meaning.ms_per_prompt = round(meaning.encoder.ms_per_prompt(PROBE_PROMPTS), 3)
        _MEANING[key] = meaning
    return _MEANING[key]
