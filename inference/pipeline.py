"""The collaborative pipeline: every strategy of DESIGN.md on one image + question, with every model resident.

The models form a ladder, cheapest first: a (small, large) pair or `sides=[...]` of N >= 2 models named by position
(`pipeline.sides`: alias -> ModelSide; `pipeline.aliases`). `run` executes one strategy (`run_strategy` on a
prepared request); `complete` is one plain call of one side (serve's plain models); `escalate` continues a
`<m>_direct` result of a model above the cheapest (`large_direct` for a pair) from that model's cached
image+question prefix with kept reasoning tokens appended (two-stage decoding); `run_many` runs several strategies
for one sample sharing work through per-model prompt caches (shared_run.py, prompt_cache.py).
"""
from __future__ import annotations

import logging

from routedvlm.errors import InputError, UnknownStrategyError
from routedvlm.router.strategies import (DEFAULT_K_GRID, LARGE_DIRECT, alias_rank,
                                         ladder_strategies, parse_k_grid, parse_strategy, transfer_id)

from .inputs import check_keep_tokens, make_request
from .pipeline_parts import Handoff, PipelineConfig, Result, close_sides, ladder_sides, start_sides
from .selectors import NEEDS_ATTENTION, NEEDS_FULL_REASONING, get_selector
from .sides.local.stages import finish_answer
from .sides.results import record
from .streaming import answer_segment

logger = logging.getLogger(__name__)
__all__ = ["CollaborativePipeline", "PipelineConfig", "Result"]


class CollaborativePipeline:
    """Run strategies with a ladder of model sides (`ModelSide` instances, or specs loaded by `sides.load_side`).

    `CollaborativePipeline(small, large)` is the pair; `CollaborativePipeline(sides=[s0, s1, s2, ...])` or
    `CollaborativePipeline.from_ladder([...])` a ladder of N >= 2 models, cheapest first, named `ladder_aliases(N)`
    (small, mid, large for three). selector: "prefix", "suffix" or "attention" (see selectors.py); k_grid: the K values
    `run_many` uses by default. Generation is greedy; `max_direct_tokens`, `max_reason_tokens`, `min_new_tokens`
    (answers) and `min_reason_tokens` (reasoning) are set on `config` (a PipelineConfig) or as keyword arguments.
    """

    #: run_many sends a sample's independent calls at once (`overlap.py`) when every side batches concurrent calls;
    #: set by the labeller only when its latencies are batched anyway (many samples in flight)
    overlap_calls: bool = False

    def __init__(self, small=None, large=None, selector: str = "prefix", k_grid=DEFAULT_K_GRID,
                 config: PipelineConfig | None = None, *, sides=None, **config_kwargs):
        self.selector_name = selector
        self.selector = get_selector(selector)
        self.k_grid = parse_k_grid(k_grid)
        self.config = config or PipelineConfig(**config_kwargs)
        self.sides = ladder_sides(small, large, sides)
        self.aliases = tuple(self.sides)

    @classmethod
    def from_ladder(cls, sides, selector: str = "prefix", k_grid=DEFAULT_K_GRID, config: PipelineConfig | None = None,
                    **config_kwargs) -> "CollaborativePipeline":
        """A pipeline over an ordered list of N >= 2 sides (objects or specs), cheapest first."""
        return cls(selector=selector, k_grid=k_grid, config=config, sides=sides, **config_kwargs)

    @property
    def small(self):
        """The cheapest side."""
        return self.sides[self.aliases[0]]

    @property
    def large(self):
        """The most expensive side."""
        return self.sides[self.aliases[-1]]

    def start(self) -> None:
        """Start every model (`ModelSide.start`, reasoners included): an engine is built now, not on a first call."""
        start_sides(self.sides)

    def close(self) -> None:
        """Close every model (`ModelSide.close`, reasoners included): engines and their processes end now."""
        close_sides(self.sides)

    @property
    def concurrent(self) -> bool:
        """Stage-one calls of the models run in threads (one per device) when the models sit on different devices."""
        devices = [side.device for side in self.sides.values()]
        return any(d != devices[0] for d in devices[1:])

    def default_strategies(self) -> list[str]:
        """Every strategy id of this ladder for the pipeline's K grid (for a pair, the pair's `default_strategies`)."""
        return ladder_strategies(self.aliases, self.k_grid)

    def side(self, alias: str):
        """The side named `alias` on this ladder."""
        if alias not in self.sides:
            raise InputError(f"This pipeline's models are {list(self.aliases)}; no model is named {alias!r}. Use a "
                             "strategy of these models.")
        return self.sides[alias]

    def check_strategy(self, strategy):
        """A parsed strategy whose models are on this ladder (else InputError naming the ladder)."""
        strat = parse_strategy(strategy) if isinstance(strategy, str) else strategy
        missing = [m for m in strat.models if m not in self.sides]
        if missing:
            raise InputError(f"Strategy {strat.id!r} runs model(s) {missing}, which this pipeline does not have: its "
                             f"models are {list(self.aliases)} (cheapest first). Use a strategy of these models.")
        return strat

    # ----- single strategies -------------------------------------------------------------------------------
    def run(self, image=None, question=None, strategy: str = LARGE_DIRECT, *, messages=None) -> Result:
        """Run one strategy id on an image (PIL or path) and a question, or on HF chat `messages`.

        `transfer_<K>` (`transfer_<a>_<b>_<K>`) runs one-stage: the small model (a) reasons (at most K tokens with the
        prefix selector), then the large model (b) encodes image + question + kept tokens cold (stage
        `<b>_transfer`). With the attention selector the answering model needs its prefix anyway, so the answer
        continues from it.
        """
        return self.run_strategy(make_request(image, question, messages), strategy)

    def run_strategy(self, request, strategy) -> Result:
        """Run one strategy (an id or a parsed `Strategy`) on a prepared request (`inputs.make_request`)."""
        strat = self.check_strategy(strategy)
        req, cfg, m = request, self.config, strat.model
        if strat.mode == "direct":
            if m != self.aliases[0]:  # a model above the cheapest answers from its kept prefix (escalate continues it)
                return self.target_direct(req, self.target_prompt(m, req), m)
            side = self.sides[m]
            with answer_segment(side):
                gen, ans, records = side.run_direct(m, req, cfg)
            return Result(ans, strat.id, None, None, records, gen)
        if strat.mode == "reason":
            side = self.sides[m]
            with answer_segment(side.reasoning_side(), "reason"):
                rr = finish_answer(side.run_reasoning(m, req, cfg, cfg.max_reason_tokens), cfg)
            handoff = Handoff(reasoning_run=rr if m != self.aliases[-1] else None)
            return Result(rr.answer, strat.id, None, rr.reasoning_text, list(rr.records), rr.answer_gen or rr.gen,
                          reasoning_generation=rr.gen, handoff=handoff)
        rr = self.sides[strat.source].run_reasoning(strat.source, req, cfg, self.reason_budget([strat.keep_tokens]))
        lp = self.target_prompt(m, req) if self.selector_name in NEEDS_ATTENTION else None
        return self._transfer(req, strat.keep_tokens, rr, lp, stage=f"{m}_transfer", base_trace=[], target=m)

    def complete(self, side: str, request, *, thinking: bool = True, partial: str | None = None,
                 max_tokens: int | None = None, min_tokens: int | None = None, check_context=None) -> Result:
        """One plain call of one side, outside any strategy (`routedvlm serve`'s plain models "small"/"large", or
        another alias of the ladder).

        thinking: reasoning mode (the reasoner checkpoint when the side has one); partial: an assistant message to
        continue; max_tokens: default the config's reasoning (or, when continuing or not thinking, direct) limit;
        check_context(prompt_tokens, max_tokens) runs before decoding. The Result's `answer` is None while the
        output is still reasoning; its `strategy` is "<side>_direct" or "<side>_reason"."""
        vlm = self.sides.get(side, self.large)
        model = (vlm.reasoner or vlm) if thinking else vlm
        mode = "reason" if thinking and model.style != "never" else "direct"
        cfg = self.config
        limit = max_tokens or (cfg.max_reason_tokens if mode == "reason" and partial is None else cfg.max_direct_tokens)
        floor = cfg.min_new_tokens if min_tokens is None else min_tokens
        check = None if check_context is None else (lambda n: check_context(n, limit))
        gen, answer, reasoning = model.complete(request, mode, max_tokens=limit, min_tokens=min(floor, limit),
                                                partial=partial, check_context=check)
        rec = record(f"{side}_{mode}", side, model, model.mode_name(mode), gen)
        finish = "stop" if gen.token_ids and not model.hit_limit(gen, limit) else "length"
        return Result(answer, f"{side}_{mode}", None, reasoning, [rec], gen, finish_reason=finish)

    def target_prompt(self, alias: str, req):
        """The image+question prefix of model `alias` (`ModelSide.prefix`), kept for its direct answer, the
        transfers it answers and `escalate`."""
        return self.sides[alias].prefix(alias, req, self.config)

    def target_direct(self, req, lp, alias: str) -> Result:
        """`<alias>_direct` answered from that model's prefix `lp` (`target_prompt`), kept for `escalate`."""
        sid = f"{alias}_direct"
        with answer_segment(self.sides[alias]):
            gen, ans, rec = lp.answer(lp.direct_text, sid)
        return Result(ans, sid, None, None, [dict(lp.prefix_record), rec], gen, handoff=Handoff(large_prompt=lp))

    def large_direct(self, req, lp) -> Result:
        """`large_direct` answered from the large side's prefix `lp` (`ModelSide.prefix`), kept for `escalate`."""
        return self.target_direct(req, lp, self.aliases[-1])

    def reason_budget(self, ks) -> int:
        """How many tokens a source model reasons for the K values `ks` (None: all reasoning)."""
        full = any(k is None for k in ks) or self.selector_name in NEEDS_FULL_REASONING
        return self.config.max_reason_tokens if full else min(max(ks), self.config.max_reason_tokens)

    def select(self, rr, k, lp, target: str | None = None):
        """(kept text, number of kept tokens, extra trace records) for K (None = all reasoning); `target`: the alias
        of the model that answers (default the most expensive)."""
        if k is None:
            return rr.reasoning_text, len(rr.reasoning_ids), []
        if self.selector_name in NEEDS_ATTENTION:
            ids, scores, rec = lp.attention_scores(rr.reasoning_text)
            idx = self.selector(len(ids), k, scores)
            return self.sides[target or self.aliases[-1]].decode([ids[i] for i in idx]), len(idx), [rec]
        idx = self.selector(len(rr.reasoning_ids), k)
        return rr.vlm.decode([rr.reasoning_ids[i] for i in idx]), len(idx), []

    def _transfer(self, req, k, rr, lp, *, stage, base_trace, small_records=None, target: str | None = None) -> Result:
        target = target or self.aliases[-1]
        side = self.sides[target]
        kept, n_kept, sel_records = self.select(rr, k, lp, target)
        small_records = list(rr.records) if small_records is None else small_records
        with answer_segment(side):
            if lp is None:  # one-stage, cold: the answering model encodes image + question + kept tokens at once
                question = side.prompts.transfer_question(req.question, kept)
                gen, ans, rec = side.answer_cold(target, req, question, stage, self.config)
            else:
                gen, ans, rec = lp.answer(lp.transfer_text(kept), stage)
        pre = [] if lp is None or base_trace else [dict(lp.prefix_record)]
        rec["keep_tokens"] = n_kept
        trace = [*base_trace, *small_records, *pre, *sel_records, rec]
        return Result(ans, transfer_id(k, rr.side, target), n_kept, rr.reasoning_text, trace, gen, kept_text=kept,
                      reasoning_generation=rr.gen, handoff=Handoff(reasoning_run=rr))

    # ----- two-stage decoding ------------------------------------------------------------------------------
    def escalate(self, result: Result, keep_tokens: int | None, *, reasoning: Result | None = None,
                 restore_rope: bool = True, source: str | None = None) -> Result:
        """Continue a `large_direct` result (on a ladder: any `<m>_direct` above the cheapest model) from its cached
        image+question prefix with K kept reasoning tokens of a cheaper model.

        The image is not encoded again and the prompt is not prefilled again; only the kept tokens and the
        rest of the answer template are. keep_tokens: K (a positive int) or None for all reasoning tokens.
        reasoning: a `<a>_reason` or transfer Result whose reasoning is reused (else model `source`, default the
        cheapest, reasons now). The answer equals `run(..., "transfer_<K>")` (`transfer_<a>_<m>_<K>`) for the sample.
        """
        if keep_tokens is not None:
            check_keep_tokens(keep_tokens)
        target = _direct_alias(result)
        lp = result.handoff.large_prompt if isinstance(result, Result) else None
        if target is None or target not in self.sides or target == self.aliases[0] or lp is None:
            above = "" if len(self.aliases) == 2 else f" (or another '<model>_direct' of {list(self.aliases[1:])})"
            got = result.strategy if isinstance(result, Result) else type(result).__name__
            raise InputError(
                f"escalate needs a 'large_direct' Result{above} from this pipeline's run/run_many. Got a {got!r} "
                "result instead; run strategy 'large_direct' first."
            )
        rr = reasoning.handoff.reasoning_run if isinstance(reasoning, Result) else None
        fresh = rr is None
        source = rr.side if rr is not None else (source or self.aliases[0])
        if source not in self.sides or alias_rank(source) >= alias_rank(target):
            raise InputError(f"escalate continues {target!r} with the reasoning of a cheaper model of "
                             f"{list(self.aliases)}; {source!r} is not one. Pass source= a model below {target!r}.")
        if fresh:
            rr = self.sides[source].run_reasoning(source, lp.request, self.config, self.reason_budget([keep_tokens]))
        lp_restore = lp if restore_rope else _NoRestore(lp)
        return self._transfer(lp.request, keep_tokens, rr, lp_restore, stage="escalate", base_trace=list(result.trace),
                              small_records=list(rr.records) if fresh else [], target=target)

    # ----- shared work -------------------------------------------------------------------------------------
    def run_many(self, image=None, question=None, strategies=None, *, messages=None) -> dict:
        """Run several strategies on one sample, sharing work; returns {strategy id: Result} (see shared_run.py).

        Shared: each source model reasons ONCE, as far as the largest K of its transfers needs (in full for `_all`,
        its own `<m>_reason`, or the suffix/attention selectors), and the cheapest model's `<m>_direct` reuses its
        image+question prefill; every answering model above the cheapest prefills its image+question prefix ONCE
        (stage `<m>_prefix`); its `<m>_direct`, every transfer it answers (in increasing source and K, each branching
        off the previous prompt where the token ids agree) and its `<m>_reason` (same checkpoint, when it reasons
        for no transfer) continue through a per-sample prompt cache (`prompt_cache.py`); the image is encoded once
        per model and role. Answers equal independent `run` calls. With `overlap_calls` on sides that batch
        (`overlap.py`), the same calls are made with a sample's independent ones at once. For a pair: small reasons once, large_direct,
        every `transfer_<K>` and `large_reason` continue from `large_prefix`.
        Every Result's trace lists the records of every call its answer was built from; records reused from another
        strategy's calls carry `"shared": True` and the same `"call"` id: the prefix spans (`<side>_prefix`,
        `<side>_branch`: prefill only) and the reasoning. So the standalone latency of a strategy = sum over its
        trace of vision_ms + prefill_ms + decode_ms (its prompt prefilled in several calls instead of one), where
        the source's reasoning record of a transfer under the prefix selector is truncated to K tokens
        (`decode_ms` = reasoning_generation.token_times_ms[K-1], `decode_tokens` = K, `"composed": True`), and
        the two-stage escalation increment = that sum without the `<m>_prefix` record.
        """
        from .shared_run import SharedRun

        from .overlap import OverlappedRun, can_overlap

        ids = list(strategies) if strategies is not None else self.default_strategies()
        strats = [self.check_strategy(s) for s in ids]
        run = OverlappedRun if self.overlap_calls and can_overlap(self) else SharedRun
        return run(self, make_request(image, question, messages)).run(strats)


def _direct_alias(result) -> str | None:
    """The model alias of a `<m>_direct` Result, else None."""
    if not isinstance(result, Result) or not isinstance(result.strategy, str) or not result.strategy.endswith("_direct"):
        return None
    try:
        strat = parse_strategy(result.strategy)
    except UnknownStrategyError:
        return None
    return strat.model if strat.mode == "direct" else None


class _NoRestore:
    """A CachedPrefix view that continues without restoring rope_deltas (stale-state negative control only)."""

    def __init__(self, lp):
        self._lp = lp

    def __getattr__(self, name):
        return getattr(self._lp, name)

    def answer(self, text, stage):
        return self._lp.answer(text, stage, restore_rope=False)
