"""The collaborative pipeline: every strategy of DESIGN.md on one image + question, with both models resident.

`run` executes one strategy; `escalate` continues a `large_direct` result from the large model's cached
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
from .stages import LargePrompt, answer_prompt, finish_answer, large_prompt, run_direct, run_reasoning
from .streaming import answer_segment

logger = logging.getLogger(__name__)
__all__ = ["CollaborativePipeline", "PipelineConfig", "Result"]


class CollaborativePipeline:
    """Run strategies with a small and a large `VLM` (instances or checkpoint paths).

    selector: "prefix", "suffix" or "attention" (see selectors.py); k_grid: the K values `run_many` uses by
    default. Generation is greedy; `max_direct_tokens`, `max_reason_tokens`, `min_new_tokens` (answers) and
    `min_reason_tokens` (reasoning) are set on `config` (a PipelineConfig) or as keyword arguments.
    """

    def __init__(self, small, large, selector: str = "prefix", k_grid=DEFAULT_K_GRID, config: PipelineConfig | None = None,
                 **config_kwargs):
        from .vlm import VLM

        self.selector_name = selector
        self.selector = get_selector(selector)
        self.k_grid = parse_k_grid(k_grid)
        self.config = config or PipelineConfig(**config_kwargs)
        self.small = small if isinstance(small, VLM) else VLM.from_pretrained(small)
        self.large = large if isinstance(large, VLM) else VLM.from_pretrained(large)

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
        strat = parse_strategy(strategy)
        return self._run_req(make_request(image, question, messages), strat)

    def _run_req(self, req, strat) -> Result:
        cfg = self.config
        if strat.id == "small_direct":
            with answer_segment(self.small):
                gen, ans, rec = run_direct(self.small, "small", req, cfg)
            return Result(ans, strat.id, None, None, [rec], gen)
        if strat.id == LARGE_DIRECT:
            return self._large_direct(req, large_prompt(self.large, req, cfg))
        if strat.id in ("small_reason", "large_reason"):
            side = self.small if strat.id == "small_reason" else self.large
            with answer_segment(side.reasoning_side(), "reason"):
                rr = finish_answer(run_reasoning(side, strat.answerer, req, cfg, cfg.max_reason_tokens), cfg)
            handoff = Handoff(reasoning_run=rr if strat.id == "small_reason" else None)
            return Result(rr.answer, strat.id, None, rr.reasoning_text, list(rr.records), rr.answer_gen or rr.gen,
                          reasoning_generation=rr.gen, handoff=handoff)
        rr = run_reasoning(self.small, "small", req, cfg, self._reason_budget([strat.keep_tokens]))
        lp = large_prompt(self.large, req, cfg) if self.selector_name in NEEDS_ATTENTION else None
        return self._transfer(req, strat.keep_tokens, rr, lp, stage="large_transfer", base_trace=[])

    def _large_direct(self, req, lp: LargePrompt) -> Result:
        with answer_segment(self.large):
            gen, ans, rec = lp.answer(lp.direct_text, LARGE_DIRECT)
        return Result(ans, LARGE_DIRECT, None, None, [dict(lp.prefix_record), rec], gen,
                      handoff=Handoff(large_prompt=lp))

    def _reason_budget(self, ks) -> int:
        full = any(k is None for k in ks) or self.selector_name in NEEDS_FULL_REASONING
        return self.config.max_reason_tokens if full else min(max(ks), self.config.max_reason_tokens)

    def _select(self, rr, k, lp):
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
        kept, n_kept, sel_records = self._select(rr, k, lp)
        small_records = list(rr.records) if small_records is None else small_records
        with answer_segment(self.large):
            if lp is None:  # one-stage, cold: the large model encodes image + question + kept tokens at once
                question = self.large.prompts.transfer_question(req.question, kept)
                gen, ans, rec = answer_prompt(self.large, req, question, stage, self.config)
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
            rr = run_reasoning(self.small, "small", lp.request, self.config, self._reason_budget([keep_tokens]))
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
        is encoded once per model. Answers equal independent `run` calls.
        Every Result's trace lists the records of every call its answer was built from; records reused from another
        strategy's calls carry `"shared": True` and the same `"call"` id: the prefix spans (`<side>_prefix`,
        `<side>_branch`: prefill only) and the reasoning. So the standalone latency of a strategy = sum over its
        trace of vision_ms + prefill_ms + decode_ms (its prompt prefilled in several calls instead of one), where
        the small reasoning record of a `transfer_<K>` under the prefix selector is truncated to K tokens
        (`decode_ms` = reasoning_generation.token_times_ms[K-1], `decode_tokens` = K, `"composed": True`), and
        the two-stage `escalate_<K>` increment = that sum without the `large_prefix` record.
        """
        from .shared_run import SharedRun

        ids = list(strategies) if strategies is not None else default_strategies(self.k_grid)
        strats = [parse_strategy(s) for s in ids]
        return SharedRun(self, make_request(image, question, messages)).run(strats)


class _NoRestore:
    """A LargePrompt view that continues without restoring rope_deltas (stale-state negative control only)."""

    def __init__(self, lp):
        self._lp = lp

    def __getattr__(self, name):
        return getattr(self._lp, name)

    def answer(self, text, stage):
        return self._lp.answer(text, stage, restore_rope=False)
