"""The collaborative pipeline: every strategy of DESIGN.md on one image + question, with both models resident.

`run` executes one strategy (`run_strategy` on a prepared request); `complete` is one plain call of one side
(serve's plain models); `escalate` continues a `large_direct` result from the large model's cached
image+question prefix with kept reasoning tokens appended (two-stage decoding); `run_many` runs several
strategies for one sample sharing work through per-model prompt caches (shared_run.py, prompt_cache.py).
"""
from __future__ import annotations

import logging

from routedvlm.errors import InputError
from routedvlm.router.strategies import DEFAULT_K_GRID, LARGE_DIRECT, default_strategies, parse_k_grid, parse_strategy, transfer_id

from .inputs import check_keep_tokens, make_request
from .pipeline_parts import Handoff, PipelineConfig, Result
from .selectors import NEEDS_ATTENTION, NEEDS_FULL_REASONING, get_selector
from .sides.base import ModelSide
from .stages import finish_answer, record
from .streaming import answer_segment

logger = logging.getLogger(__name__)
__all__ = ["CollaborativePipeline", "PipelineConfig", "Result"]


class CollaborativePipeline:
    """Run strategies with a small and a large model side (`ModelSide` instances, or checkpoint paths loaded as `VLM`).

    selector: "prefix", "suffix" or "attention" (see selectors.py); k_grid: the K values `run_many` uses by
    default. Generation is greedy; `max_direct_tokens`, `max_reason_tokens`, `min_new_tokens` (answers) and
    `min_reason_tokens` (reasoning) are set on `config` (a PipelineConfig) or as keyword arguments.
    """

    #: run_many sends a sample's independent calls at once (`overlap.py`) when both sides batch concurrent calls; set by
    #: the labeller only when its latencies are batched anyway (many samples in flight)
    overlap_calls: bool = False

    def __init__(self, small, large, selector: str = "prefix", k_grid=DEFAULT_K_GRID, config: PipelineConfig | None = None,
                 **config_kwargs):
        from .sides import load_side

        self.selector_name = selector
        self.selector = get_selector(selector)
        self.k_grid = parse_k_grid(k_grid)
        self.config = config or PipelineConfig(**config_kwargs)
        self.small = small if isinstance(small, ModelSide) else load_side(small)
        self.large = large if isinstance(large, ModelSide) else load_side(large)

    @property
    def concurrent(self) -> bool:
        """Stage-one calls of both models run in two threads when the models sit on different devices."""
        return self.small.device != self.large.device

    # ----- single strategies -------------------------------------------------------------------------------
    def run(self, image=None, question=None, strategy: str = LARGE_DIRECT, *, messages=None) -> Result:
        """Run one strategy id on an image (PIL or path) and a question, or on HF chat `messages`.

        `transfer_<K>` runs one-stage: the small model reasons (at most K tokens with the prefix selector),
        then the large model encodes image + question + kept tokens cold (stage `large_transfer`). With the
        attention selector the large model needs its prefix anyway, so the answer continues from it.
        """
        return self.run_strategy(make_request(image, question, messages), strategy)

    def run_strategy(self, request, strategy) -> Result:
        """Run one strategy (an id or a parsed `Strategy`) on a prepared request (`inputs.make_request`)."""
        strat = parse_strategy(strategy) if isinstance(strategy, str) else strategy
        req, cfg = request, self.config
        if strat.id == "small_direct":
            with answer_segment(self.small):
                gen, ans, records = self.small.run_direct("small", req, cfg)
            return Result(ans, strat.id, None, None, records, gen)
        if strat.id == LARGE_DIRECT:
            return self.large_direct(req, self.large.large_prompt(req, cfg))
        if strat.id in ("small_reason", "large_reason"):
            side = self.small if strat.id == "small_reason" else self.large
            with answer_segment(side.reasoning_side(), "reason"):
                rr = finish_answer(side.run_reasoning(strat.answerer, req, cfg, cfg.max_reason_tokens), cfg)
            handoff = Handoff(reasoning_run=rr if strat.id == "small_reason" else None)
            return Result(rr.answer, strat.id, None, rr.reasoning_text, list(rr.records), rr.answer_gen or rr.gen,
                          reasoning_generation=rr.gen, handoff=handoff)
        rr = self.small.run_reasoning("small", req, cfg, self.reason_budget([strat.keep_tokens]))
        lp = self.large.large_prompt(req, cfg) if self.selector_name in NEEDS_ATTENTION else None
        return self._transfer(req, strat.keep_tokens, rr, lp, stage="large_transfer", base_trace=[])

    def complete(self, side: str, request, *, thinking: bool = True, partial: str | None = None,
                 max_tokens: int | None = None, min_tokens: int | None = None, check_context=None) -> Result:
        """One plain call of one side, outside any strategy (`routedvlm serve`'s plain models "small"/"large").

        thinking: reasoning mode (the reasoner checkpoint when the side has one); partial: an assistant message to
        continue; max_tokens: default the config's reasoning (or, when continuing or not thinking, direct) limit;
        check_context(prompt_tokens, max_tokens) runs before decoding. The Result's `answer` is None while the
        output is still reasoning; its `strategy` is "<side>_direct" or "<side>_reason"."""
        vlm = self.small if side == "small" else self.large
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

    def large_direct(self, req, lp) -> Result:
        """`large_direct` answered from the large side's prefix `lp` (`ModelSide.large_prompt`), kept for `escalate`."""
        with answer_segment(self.large):
            gen, ans, rec = lp.answer(lp.direct_text, LARGE_DIRECT)
        return Result(ans, LARGE_DIRECT, None, None, [dict(lp.prefix_record), rec], gen,
                      handoff=Handoff(large_prompt=lp))

    def reason_budget(self, ks) -> int:
        """How many tokens the small side reasons for the K values `ks` (None: all reasoning)."""
        full = any(k is None for k in ks) or self.selector_name in NEEDS_FULL_REASONING
        return self.config.max_reason_tokens if full else min(max(ks), self.config.max_reason_tokens)

    def select(self, rr, k, lp):
        """(kept text, number of kept tokens, extra trace records) for K (None = all reasoning)."""
        if k is None:
            return rr.reasoning_text, len(rr.reasoning_ids), []
        if self.selector_name in NEEDS_ATTENTION:
            ids, scores, rec = lp.attention_scores(rr.reasoning_text)
            idx = self.selector(len(ids), k, scores)
            return self.large.decode([ids[i] for i in idx]), len(idx), [rec]
        idx = self.selector(len(rr.reasoning_ids), k)
        return rr.vlm.decode([rr.reasoning_ids[i] for i in idx]), len(idx), []

    def _transfer(self, req, k, rr, lp, *, stage, base_trace, small_records=None) -> Result:
        kept, n_kept, sel_records = self.select(rr, k, lp)
        small_records = list(rr.records) if small_records is None else small_records
        with answer_segment(self.large):
            if lp is None:  # one-stage, cold: the large model encodes image + question + kept tokens at once
                question = self.large.prompts.transfer_question(req.question, kept)
                gen, ans, rec = self.large.answer_prompt(req, question, stage, self.config)
            else:
                gen, ans, rec = lp.answer(lp.transfer_text(kept), stage)
        pre = [] if lp is None or base_trace else [dict(lp.prefix_record)]
        rec["keep_tokens"] = n_kept
        trace = [*base_trace, *small_records, *pre, *sel_records, rec]
        return Result(ans, transfer_id(k), n_kept, rr.reasoning_text, trace, gen, kept_text=kept,
                      reasoning_generation=rr.gen, handoff=Handoff(reasoning_run=rr))

    # ----- two-stage decoding ------------------------------------------------------------------------------
    def escalate(self, result: Result, keep_tokens: int | None, *, reasoning: Result | None = None,
                 restore_rope: bool = True) -> Result:
        """Continue a `large_direct` result from its cached image+question prefix with K kept reasoning tokens.

        The image is not encoded again and the prompt is not prefilled again; only the kept tokens and the
        rest of the answer template are. keep_tokens: K (a positive int) or None for all reasoning tokens.
        reasoning: a `small_reason` Result whose reasoning is reused (else the small model reasons now).
        The answer equals `run(..., "transfer_<K>")` for the same sample.
        """
        if keep_tokens is not None:
            check_keep_tokens(keep_tokens)
        lp = result.handoff.large_prompt if isinstance(result, Result) else None
        if result.strategy != LARGE_DIRECT or lp is None:
            raise InputError(
                f"escalate needs a 'large_direct' Result from this pipeline's run/run_many. Got a {result.strategy!r} "
                "result instead; run strategy 'large_direct' first."
            )
        rr = reasoning.handoff.reasoning_run if isinstance(reasoning, Result) else None
        fresh = rr is None
        if fresh:
            rr = self.small.run_reasoning("small", lp.request, self.config, self.reason_budget([keep_tokens]))
        lp_restore = lp if restore_rope else _NoRestore(lp)
        res = self._transfer(lp.request, keep_tokens, rr, lp_restore, stage="escalate", base_trace=list(result.trace),
                             small_records=list(rr.records) if fresh else [])
        return res

    # ----- shared work -------------------------------------------------------------------------------------
    def run_many(self, image=None, question=None, strategies=None, *, messages=None) -> dict:
        """Run several strategies on one sample, sharing work; returns {strategy id: Result} (see shared_run.py).

        Shared: the small model reasons ONCE, as far as the largest K needs (in full for `transfer_all`,
        `small_reason`, or the suffix/attention selectors), and `small_direct` reuses its image+question prefill;
        the large model's image+question prefix is prefilled ONCE (stage `large_prefix`); `large_direct`, every
        `transfer_<K>` (in increasing K, each branching off the previous K's prompt where the token ids agree) and
        `large_reason` (same checkpoint) continue through a per-sample prompt cache (`prompt_cache.py`); the image
        is encoded once per model. Answers equal independent `run` calls. With `overlap_calls` on sides that batch
        (`overlap.py`), the same calls are made with a sample's independent ones at once.
        Every Result's trace lists the records of every call its answer was built from; records reused from another
        strategy's calls carry `"shared": True` and the same `"call"` id: the prefix spans (`<side>_prefix`,
        `<side>_branch`: prefill only) and the reasoning. So the standalone latency of a strategy = sum over its
        trace of vision_ms + prefill_ms + decode_ms (its prompt prefilled in several calls instead of one), where
        the small reasoning record of a `transfer_<K>` under the prefix selector is truncated to K tokens
        (`decode_ms` = reasoning_generation.token_times_ms[K-1], `decode_tokens` = K, `"composed": True`), and
        the two-stage `escalate_<K>` increment = that sum without the `large_prefix` record.
        """
        from .overlap import OverlappedRun, can_overlap
        from .shared_run import SharedRun

        ids = list(strategies) if strategies is not None else default_strategies(self.k_grid)
        strats = [parse_strategy(s) for s in ids]
        run = OverlappedRun if self.overlap_calls and can_overlap(self) else SharedRun
        return run(self, make_request(image, question, messages)).run(strats)


class _NoRestore:
    """A LargePrompt view that continues without restoring rope_deltas (stale-state negative control only)."""

    def __init__(self, lp):
        self._lp = lp

    def __getattr__(self, name):
        return getattr(self._lp, name)

    def answer(self, text, stage):
        return self._lp.answer(text, stage, restore_rope=False)
