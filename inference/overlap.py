"""`run_many` with a sample's independent calls in flight at once, for sides that batch concurrent calls.

`OverlappedRun` makes exactly the calls `SharedRun` makes on sides without an in-process prompt cache (HTTP servers,
in-process engines), with the same prompts, cache namespaces and trace records, so the answers and what each record
measures are the same; only the order differs: the small reasoning, `small_direct`, `large_direct` and `large_reason`
are sent together, then every `transfer_<K>` (and the closing of a cut `small_reason`) together once the reasoning is
back. A sample then takes about two stage times instead of the sum of its stages. The labeller uses it only when its
latencies are batched anyway (many samples in flight on sides that are not `stateful`: `pipe.overlap_calls`); with
one request in flight per model the serial `SharedRun` keeps every measured time standalone.
"""
from __future__ import annotations

from routedvlm.router.strategies import LARGE_DIRECT, transfer_id

from .pipeline_parts import Result, parallel
from .shared_run import SharedRun, _shared
from .stages import finish_answer


def can_overlap(pipe) -> bool:
    """Both sides take concurrent calls and neither keeps an in-process prompt cache (the overlapped order)."""
    return all(not side.stateful and side.prompt_cache("probe") is None for side in (pipe.small, pipe.large))


class OverlappedRun(SharedRun):
    """The calls of `SharedRun` on cache-less sides, independent ones at once (see the module docstring)."""

    def run(self, strats) -> dict:
        pipe, cfg = self.pipe, self.cfg
        kinds = {s.id for s in strats}
        ks = sorted({s.keep_tokens for s in strats if s.is_transfer}, key=lambda k: (k is None, k or 0))
        budget = cfg.max_reason_tokens if "small_reason" in kinds else (pipe.reason_budget(ks) if ks else 0)
        lp = pipe.large.large_prompt(self.req, cfg) if LARGE_DIRECT in kinds or ks else None
        if lp is not None:
            lp.overlap = True  # a transfer's cold repeat beside its two-stage calls
        jobs = {}
        if budget:
            jobs["rr"] = lambda: self._small_reasoning(budget, False)
        if "small_direct" in kinds:
            jobs["small_direct"] = self._small_direct
        if lp is not None:
            jobs[LARGE_DIRECT] = lambda: pipe.large_direct(self.req, lp)
        if "large_reason" in kinds:
            jobs["large_reason"] = lambda: self._large_reason(None)
        out = parallel(jobs, True)
        rr = out.pop("rr", None)
        if LARGE_DIRECT in out:
            out[LARGE_DIRECT].trace[0]["shared"] = True
        later = {transfer_id(k): (lambda k=k: self._transfer(lp, rr, k, pipe.select(rr, k, lp), None)) for k in ks}
        if "small_reason" in kinds:
            later["small_reason"] = lambda: self._small_reason(rr)
        out.update(parallel(later, True))
        return {s.id: out[s.id] for s in strats}

    def _small_reason(self, rr) -> Result:
        done_rr = finish_answer(rr, self.cfg)
        return Result(done_rr.answer, "small_reason", None, rr.reasoning_text, _shared(done_rr.records),
                      done_rr.answer_gen or rr.gen, reasoning_generation=rr.gen, handoff=_handoff(rr))


def _handoff(rr):
    from .pipeline_parts import Handoff

    return Handoff(reasoning_run=rr)
