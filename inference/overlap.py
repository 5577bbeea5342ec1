"""`run_many` with a sample's independent calls in flight at once, for sides that batch concurrent calls.

`OverlappedRun` makes exactly the calls `SharedRun` makes on sides without an in-process prompt cache (HTTP servers,
in-process engines), with the same prompts, cache namespaces and trace records, so the answers and what each record
measures are the same; only the order differs: every source's reasoning, the cheapest model's direct answer, every
target's direct answer and every `<m>_reason` that is no source are sent together; every transfer (and the closing
of a cut `<m>_reason`) goes out once the source reasoning and the target's direct answer it needs are back, without
waiting for what no transfer needs (the cheapest model's direct answer, a target's own long reasoning). A sample then
takes about two stage times instead of the sum of its stages. The labeller uses it only when its latencies are batched anyway (many samples in
flight on sides that are not `stateful`: `pipe.overlap_calls`); with one request in flight per model the serial
`SharedRun` keeps every measured time standalone.
"""
from __future__ import annotations

from concurrent.futures import wait

from routedvlm.router.strategies import transfer_id

from .pipeline_parts import Handoff, Result
from .threads import parallel, shared_pool
from .shared_run import SharedRun, _shared
from .sides.local.stages import finish_answer


def can_overlap(pipe) -> bool:
    """Every side takes concurrent calls and none keeps an in-process prompt cache (the overlapped order)."""
    return all(not side.stateful and not side.shares_prefixes for side in pipe.sides.values())


class OverlappedRun(SharedRun):
    """The calls of `SharedRun` on cache-less sides, independent ones at once (see the module docstring)."""

    def run(self, strats) -> dict:
        pipe, cfg, aliases = self.pipe, self.cfg, self.pipe.aliases
        kinds, transfers, out_ks, sources, targets = self.plan(strats)
        lps = {m: pipe.target_prompt(m, self.req) for m in targets}
        for lp in lps.values():
            lp.overlap = True  # a transfer's cold repeat beside its two-stage calls
        aside = {}  # what no transfer waits for: sent now, collected at the end
        if f"{aliases[0]}_direct" in kinds:
            aside[f"{aliases[0]}_direct"] = self._first_direct
        for m in aliases:
            if f"{m}_reason" in kinds and m not in sources:
                aside[f"{m}_reason"] = lambda m=m: self._target_reason(m, None)
        jobs = {}
        for m in sources:
            budget = cfg.max_reason_tokens if f"{m}_reason" in kinds else pipe.reason_budget(out_ks[m])
            jobs[("rr", m)] = lambda m=m, b=budget: self._reasoning(m, b, False)
        for m in targets:
            jobs[f"{m}_direct"] = lambda m=m: pipe.target_direct(self.req, lps[m], m)
        pending = {name: shared_pool().submit(fn) for name, fn in aside.items()}
        try:
            done = parallel(jobs, True)
            rr = {m: done.pop(("rr", m)) for m in sources}
            out = dict(done)
            for m in targets:
                out[f"{m}_direct"].trace[0]["shared"] = True
            later = {transfer_id(k, a, b): (lambda a=a, k=k, b=b: self._transfer(
                b, lps[b], rr[a], k, pipe.select(rr[a], k, lps[b], b), None)) for a, k, b in transfers}
            for m in sources:
                if f"{m}_reason" in kinds:
                    later[f"{m}_reason"] = lambda m=m: self._source_reason(m, rr[m])
            out.update(parallel(later, True))
        finally:
            wait(pending.values())  # none left running behind a failure
        out.update({name: fut.result() for name, fut in pending.items()})
        return {s.id: out[s.id] for s in strats}

    def _source_reason(self, alias: str, rr) -> Result:
        done_rr = finish_answer(rr, self.cfg)
        return Result(done_rr.answer, f"{alias}_reason", None, rr.reasoning_text, _shared(done_rr.records),
                      done_rr.answer_gen or rr.gen, reasoning_generation=rr.gen, handoff=Handoff(reasoning_run=rr))
