"""`CollaborativePipeline.run_many`: several strategies on one sample, sharing work through per-model prompt caches.

Each model plays up to two roles. A *source* (the cheapest model when it reasons, any model whose reasoning a
transfer keeps) reasons once, as far as its largest K needs; when the cheapest model's `<m>_direct` is asked for, both
of its prompts share one prefill of image + question + chat header. A *target* (every model above the cheapest whose
direct answer or an incoming transfer is asked for; for a pair: large) prefills its image+question prefix once
(`<m>_prefix`); its `<m>_direct`, every transfer it answers (by source, then increasing K) and its `<m>_reason` (when
one checkpoint serves both modes and the model reasons for no transfer) continue through a `PromptCache`, so each
transfer branches off the previous prompt where their token ids agree. A side without an in-process prompt cache
(`ModelSide.prompt_cache` None: an HTTP side) runs each stage on its own, sharing only the reasoning and the prefix;
`ModelSide.start_sample` lets it isolate its measurements (the OpenAI side: a vLLM `cache_salt` per sample,
`sides/http/remote_prompt.py`).
"""
from __future__ import annotations

from routedvlm.router.strategies import alias_rank, transfer_id

from .pipeline_parts import Handoff, Result, parallel_sides
from .sides.local.prompt_cache import PromptCache
from .sides.local.stages import direct_inputs, finish_answer, reason_text


def _k_order(k):
    return (k is None, k or 0)


class SharedRun:
    """The shared work of one `run_many` call: one prompt cache per (side, model, role), created on first use."""

    def __init__(self, pipe, request):
        self.pipe, self.req, self.cfg = pipe, request, pipe.config
        self._caches, self._direct_in = {}, {}
        seen = set()
        for side in pipe.sides.values():
            if id(side) not in seen:
                seen.add(id(side))
                side.start_sample(request)

    def cache(self, vlm, side: str, role: str = "source") -> PromptCache | None:
        """The sample's prompt cache of `vlm` as model `side` in `role` ("source"/"target"), None for a side that has
        none."""
        key = (side, id(vlm), role)
        if key not in self._caches:
            self._caches[key] = vlm.prompt_cache(side)
        return self._caches[key]

    def plan(self, strats):
        """(ids asked for, transfers as (source, K, target) in run order, K values per source, sources, targets)."""
        aliases = self.pipe.aliases
        kinds = {s.id for s in strats}
        transfers = sorted({(s.source, s.keep_tokens, s.model) for s in strats if s.is_transfer},
                           key=lambda t: (alias_rank(t[2]), alias_rank(t[0]), _k_order(t[1])))
        out_ks = {m: sorted({k for a, k, _ in transfers if a == m}, key=_k_order) for m in aliases}
        sources = [m for m in aliases if out_ks[m] or (m == aliases[0] and f"{m}_reason" in kinds)]
        targets = [m for m in aliases[1:] if f"{m}_direct" in kinds or any(b == m for _, _, b in transfers)]
        return kinds, transfers, out_ks, sources, targets

    def run(self, strats) -> dict:
        pipe, cfg, aliases = self.pipe, self.cfg, self.pipe.aliases
        kinds, transfers, out_ks, sources, targets = self.plan(strats)
        jobs = {}
        for m in sources:
            budget = cfg.max_reason_tokens if f"{m}_reason" in kinds else pipe.reason_budget(out_ks[m])
            with_direct = m == aliases[0] and f"{m}_direct" in kinds
            jobs[("rr", m)] = (m, lambda m=m, b=budget, d=with_direct: self._reasoning(m, b, d))
        for m in targets:
            jobs[("lp", m)] = (m, lambda m=m: pipe.target_prompt(m, self.req))
        done = parallel_sides(jobs, pipe.sides, pipe.concurrent)
        rr = {m: done[("rr", m)] for m in sources}
        out = {}
        if f"{aliases[0]}_direct" in kinds:
            out[f"{aliases[0]}_direct"] = self._first_direct()
        for m in targets:
            incoming = [(a, k) for a, k, b in transfers if b == m]
            with_reason = f"{m}_reason" in kinds and m not in rr
            out.update(self._target(m, done[("lp", m)], rr, incoming, with_reason))
        for m in sources:
            if f"{m}_reason" in kinds:
                done_rr = finish_answer(rr[m], cfg)
                out[f"{m}_reason"] = Result(done_rr.answer, f"{m}_reason", None, rr[m].reasoning_text,
                                            _shared(done_rr.records), done_rr.answer_gen or rr[m].gen,
                                            reasoning_generation=rr[m].gen, handoff=Handoff(reasoning_run=rr[m]))
        for m in aliases:
            if f"{m}_reason" in kinds and f"{m}_reason" not in out:
                out[f"{m}_reason"] = self._target_reason(m, None)
        return {s.id: out[s.id] for s in strats}

    # ----- sources: reasoning, and the cheapest model's direct answer ---------------------------------------------
    def _reasoning(self, alias: str, budget: int, with_direct: bool):
        side = self.pipe.sides[alias]
        vlm = side.reasoning_side()
        cache, upcoming = self.cache(vlm, alias), []
        if cache is not None and with_direct and vlm is side:  # one checkpoint serves both modes: announce the direct prompt
            self._direct_in[alias] = direct_inputs(side, self.req)
            upcoming = [self._direct_in[alias]["input_ids"]]
        return side.run_reasoning(alias, self.req, self.cfg, budget, cache=cache, upcoming=upcoming)

    def _first_direct(self) -> Result:
        alias = self.pipe.aliases[0]
        side = self.pipe.sides[alias]
        gen, ans, records = side.run_direct(alias, self.req, self.cfg, cache=self.cache(side, alias),
                                            inputs=self._direct_in.get(alias))
        return Result(ans, f"{alias}_direct", None, None, records, gen)

    # ----- targets: direct, incoming transfers, reasoning from one prefix ------------------------------------------
    def _target(self, alias: str, lp, rr: dict, incoming: list, with_reason: bool) -> dict:
        """<m>_direct, every transfer to m (by source, increasing K), and <m>_reason when it shares the checkpoint."""
        pipe, side, direct = self.pipe, self.pipe.sides[alias], f"{alias}_direct"
        selected = {(a, k): pipe.select(rr[a], k, lp, alias) for a, k in incoming}
        cache = self.cache(side, alias, "target")
        if cache is None:  # no in-process cache (the server caches the prefix): every prompt is sent on its own
            out = {direct: pipe.target_direct(self.req, lp, alias)}
            out[direct].trace[0]["shared"] = True
            out.update({transfer_id(k, a, alias): self._transfer(alias, lp, rr[a], k, selected[(a, k)], None)
                        for a, k in incoming})
            return out
        cache.seed(lp.prefix.input_ids[0].tolist(), lp.prefix.cache, lp.prefix.rope_deltas, dict(lp.prefix_record))
        reasoner = side.reasoning_side() if with_reason else None
        plan = [(direct, None, lp.direct_inputs)]
        plan += [(transfer_id(k, a, alias), (a, k), lp.inputs_for(lp.transfer_text(selected[(a, k)][0])))
                 for a, k in incoming]
        if reasoner is side:
            plan.append((f"{alias}_reason", None, lp.inputs_for(reason_text(reasoner, self.req))))
        out = {}
        for i, (sid, pair, inputs) in enumerate(plan):
            upcoming = [later[2]["input_ids"] for later in plan[i + 1:]]
            if sid == direct:
                gen, ans, records = side.run_direct(alias, self.req, self.cfg, cache=cache, upcoming=upcoming,
                                                    inputs=inputs)
                out[sid] = Result(ans, sid, None, None, records, gen, handoff=Handoff(large_prompt=lp))
            elif pair is None:
                out[sid] = self._target_reason(alias, cache, inputs)
            else:
                a, k = pair
                out[sid] = self._transfer(alias, lp, rr[a], k, selected[pair], (cache, inputs, upcoming))
        return out

    def _transfer(self, alias, lp, rr, k, selection, cached) -> Result:
        kept, n_kept, sel_records = selection
        side = self.pipe.sides[alias]
        if cached is None:  # no in-process cache: the two-stage call and the prefix it reused (remote_prompt.py)
            gen, ans, target = lp.transfer(lp.transfer_text(kept))
        else:
            cache, inputs, upcoming = cached
            gen, target = cache.generate(inputs, f"{alias}_transfer", side.mode_name("direct"),
                                         max_new_tokens=self.cfg.max_direct_tokens,
                                         min_new_tokens=self.cfg.min_new_tokens, upcoming=upcoming)
            ans = side.answer_text(gen.token_ids, "direct")
        target[-1]["keep_tokens"] = n_kept
        trace = [*_source_records_for(rr, k, self.pipe.selector_name), *target[:-1], *sel_records, target[-1]]
        return Result(ans, transfer_id(k, rr.side, alias), n_kept, rr.reasoning_text, trace, gen, kept_text=kept,
                      reasoning_generation=rr.gen, handoff=Handoff(reasoning_run=rr))

    def _target_reason(self, alias: str, cache, inputs=None) -> Result:
        cfg = self.cfg
        run = self.pipe.sides[alias].run_reasoning(alias, self.req, cfg, cfg.max_reason_tokens, cache=cache,
                                                   inputs=inputs)
        rr = finish_answer(run, cfg)
        return Result(rr.answer, f"{alias}_reason", None, rr.reasoning_text, list(rr.records), rr.answer_gen or rr.gen,
                      reasoning_generation=rr.gen)


def _shared(records):
    return [{**r, "shared": True} for r in records]


def _source_records_for(rr, k, selector):
    """The source model's records as the standalone transfer would have paid them: its reasoning prompt's spans and
    the reasoning call, whose decode is truncated to k tokens under the prefix selector."""
    out = []
    for r in rr.records:
        if r["stage"] == f"{rr.side}_reason_answer":
            continue
        rec = dict(r, shared=True)
        if r["stage"] == f"{rr.side}_reason" and k is not None and selector == "prefix" and rr.gen.output_tokens > k:
            rec.update(decode_ms=round(rr.gen.token_times_ms[k - 1], 3), decode_tokens=k, composed=True)
        out.append(rec)
    return out
