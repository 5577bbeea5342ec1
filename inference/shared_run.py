"""`CollaborativePipeline.run_many`: several strategies on one sample, sharing work through per-model prompt caches.

The small model reasons once (as far as the largest K needs) and, when `small_direct` is asked for, both of its
prompts share one prefill of image + question + chat header. The large model prefills its image+question prefix
once (`large_prefix`); `large_direct`, every `transfer_<K>` in increasing K and `large_reason` (when one checkpoint
serves both modes) continue through a `PromptCache`, so each transfer branches off the previous K's prompt where
their token ids agree. A side without an in-process prompt cache (`ModelSide.prompt_cache` None: an HTTP side) runs
each stage on its own, sharing only the reasoning and the prefix; `ModelSide.start_sample` lets it isolate its
measurements (the OpenAI side: a vLLM `cache_salt` per sample, `backends/remote_prompt.py`).
"""
from __future__ import annotations

from routedvlm.router.strategies import LARGE_DIRECT, transfer_id

from .pipeline_parts import Handoff, Result, parallel
from .prompt_cache import PromptCache
from .stages import direct_inputs, finish_answer, reason_text


class SharedRun:
    """The shared work of one `run_many` call: one prompt cache per (side, model), created on first use."""

    def __init__(self, pipe, request):
        self.pipe, self.req, self.cfg = pipe, request, pipe.config
        self._caches = {}
        for side in (pipe.small, pipe.large):
            side.start_sample(request)

    def cache(self, vlm, side: str) -> PromptCache | None:
        """The sample's prompt cache of `vlm` (one per side and model), None for a side that has none."""
        key = (side, id(vlm))
        if key not in self._caches:
            self._caches[key] = vlm.prompt_cache(side)
        return self._caches[key]

    def run(self, strats) -> dict:
        pipe, cfg = self.pipe, self.cfg
        kinds = {s.id for s in strats}
        ks = sorted({s.keep_tokens for s in strats if s.is_transfer}, key=lambda k: (k is None, k or 0))
        budget = cfg.max_reason_tokens if "small_reason" in kinds else (pipe.reason_budget(ks) if ks else 0)
        jobs = {}
        if budget:
            jobs["rr"] = lambda: self._small_reasoning(budget, "small_direct" in kinds)
        if LARGE_DIRECT in kinds or ks:
            jobs["lp"] = lambda: pipe.large.large_prompt(self.req, cfg)
        done = parallel(jobs, pipe.concurrent)
        rr, lp = done.get("rr"), done.get("lp")
        out = {}
        if "small_direct" in kinds:
            out["small_direct"] = self._small_direct()
        if lp is not None:
            out.update(self._large(lp, rr, ks, "large_reason" in kinds))
        if "small_reason" in kinds:
            done_rr = finish_answer(rr, cfg)
            out["small_reason"] = Result(done_rr.answer, "small_reason", None, rr.reasoning_text,
                                         _shared(done_rr.records), done_rr.answer_gen or rr.gen,
                                         reasoning_generation=rr.gen, handoff=Handoff(reasoning_run=rr))
        if "large_reason" in kinds and "large_reason" not in out:
            out["large_reason"] = self._large_reason(None)
        return {s.id: out[s.id] for s in strats}

    # ----- small side ---------------------------------------------------------------------------------------
    def _small_reasoning(self, budget: int, with_direct: bool):
        small = self.pipe.small
        vlm = small.reasoning_side()
        cache, upcoming = self.cache(vlm, "small"), []
        if cache is not None and with_direct and vlm is small:  # one checkpoint serves both modes: announce the direct prompt
            self._direct_in = direct_inputs(small, self.req)
            upcoming = [self._direct_in["input_ids"]]
        return small.run_reasoning("small", self.req, self.cfg, budget, cache=cache, upcoming=upcoming)

    def _small_direct(self) -> Result:
        small = self.pipe.small
        gen, ans, records = small.run_direct("small", self.req, self.cfg, cache=self.cache(small, "small"),
                                             inputs=getattr(self, "_direct_in", None))
        return Result(ans, "small_direct", None, None, records, gen)

    # ----- large side ---------------------------------------------------------------------------------------
    def _large(self, lp, rr, ks, with_reason: bool) -> dict:
        """large_direct, transfer_<K> in increasing K, and large_reason when it shares the checkpoint."""
        pipe = self.pipe
        selected = {k: pipe.select(rr, k, lp) for k in ks}
        cache = self.cache(pipe.large, "large")
        if cache is None:  # no in-process cache (the server caches the prefix): every prompt is sent on its own
            out = {LARGE_DIRECT: pipe.large_direct(self.req, lp)}
            out[LARGE_DIRECT].trace[0]["shared"] = True
            out.update({transfer_id(k): self._transfer(lp, rr, k, selected[k], None) for k in ks})
            return out
        cache.seed(lp.prefix.input_ids[0].tolist(), lp.prefix.cache, lp.prefix.rope_deltas, dict(lp.prefix_record))
        reasoner = pipe.large.reasoning_side() if with_reason else None
        plan = [(LARGE_DIRECT, lp.direct_inputs)]
        plan += [(transfer_id(k), lp.inputs_for(lp.transfer_text(selected[k][0]))) for k in ks]
        if reasoner is pipe.large:
            plan.append(("large_reason", lp.inputs_for(reason_text(reasoner, self.req))))
        out = {}
        for i, (sid, inputs) in enumerate(plan):
            upcoming = [later["input_ids"] for _, later in plan[i + 1:]]
            if sid == LARGE_DIRECT:
                gen, ans, records = pipe.large.run_direct("large", self.req, self.cfg, cache=cache,
                                                          upcoming=upcoming, inputs=inputs)
                out[sid] = Result(ans, LARGE_DIRECT, None, None, records, gen, handoff=Handoff(large_prompt=lp))
            elif sid == "large_reason":
                out[sid] = self._large_reason(cache, inputs)
            else:
                k = ks[i - 1]
                out[sid] = self._transfer(lp, rr, k, selected[k], (cache, inputs, upcoming))
        return out

    def _transfer(self, lp, rr, k, selection, cached) -> Result:
        kept, n_kept, sel_records = selection
        if cached is None:  # no in-process cache: the two-stage call and the prefix it reused (remote_prompt.py)
            gen, ans, large = lp.transfer(lp.transfer_text(kept))
        else:
            cache, inputs, upcoming = cached
            gen, large = cache.generate(inputs, "large_transfer", self.pipe.large.mode_name("direct"),
                                        max_new_tokens=self.cfg.max_direct_tokens,
                                        min_new_tokens=self.cfg.min_new_tokens, upcoming=upcoming)
            ans = self.pipe.large.answer_text(gen.token_ids, "direct")
        large[-1]["keep_tokens"] = n_kept
        trace = [*_small_records_for(rr, k, self.pipe.selector_name), *large[:-1], *sel_records, large[-1]]
        return Result(ans, transfer_id(k), n_kept, rr.reasoning_text, trace, gen, kept_text=kept,
                      reasoning_generation=rr.gen, handoff=Handoff(reasoning_run=rr))

    def _large_reason(self, cache, inputs=None) -> Result:
        cfg = self.cfg
        run = self.pipe.large.run_reasoning("large", self.req, cfg, cfg.max_reason_tokens, cache=cache, inputs=inputs)
        rr = finish_answer(run, cfg)
        return Result(rr.answer, "large_reason", None, rr.reasoning_text, list(rr.records), rr.answer_gen or rr.gen,
                      reasoning_generation=rr.gen)


def _shared(records):
    return [{**r, "shared": True} for r in records]


def _small_records_for(rr, k, selector):
    """The small model's records as the standalone `transfer_<k>` would have paid them: its reasoning prompt's
    spans and the reasoning call, whose decode is truncated to k tokens under the prefix selector."""
    out = []
    for r in rr.records:
        if r["stage"] == f"{rr.side}_reason_answer":
            continue
        rec = dict(r, shared=True)
        if r["stage"] == f"{rr.side}_reason" and k is not None and selector == "prefix" and rr.gen.output_tokens > k:
            rec.update(decode_ms=round(rr.gen.token_times_ms[k - 1], 3), decode_tokens=k, composed=True)
        out.append(rec)
    return out
