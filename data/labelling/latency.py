"""Latency columns of labels.parquet, composed from the stage records of one shared `run_many` per sample.

A strategy's standalone latency (`latency_ms__<s>`) is what it would cost run alone, built from the stage
records its `Result.trace` lists (see `inference/pipeline.py: run_many`); the cost of one record is
`stage_ms(side, record)`: by default the measured wall clock, `vision_ms + prefill_ms + decode_ms`, or a fitted
latency model (`inference.latency_model.cost_stage_fn`, `routedvlm label --cost profile.json`).
`run_many` runs each model's prompts through a per-sample prompt cache: a prompt's prefill is split where a later
prompt of the same model branches off, and a trace lists every call its prompt was built from, its own and the
reused ones (`shared`, with the `call` id of the measured call): `<side>_prefix` (the image and the first prompt
tokens, vision + prefill), `<side>_branch` (prefill only), then the stage's own call (prefill of the rest + decode).
So a strategy's prompt prefill is the sum of several measured calls instead of one (a close, slightly
conservative estimate of one cold call); the image is counted once. Per strategy:

- `small_direct`: the small model's direct call (vision + prefill + decode), its prompt possibly split into
  `small_prefix` (shared with `small_reason`) + the direct call.
- `large_direct`: the large model's image+question prefix (`large_prefix`: vision + prefill) + its direct-answer
  continuation (prefill of the rest of the prompt with the prefix cached + decode), with a `large_branch` between
  them when `large_reason` shares the chat header on the same checkpoint — what `run` does alone.
- `small_reason` / `large_reason`: the reasoning call (vision + prefill + decode of the whole reasoning, its prompt
  possibly split into prefix/branch records) + the answer continuation when the reasoning stopped before answering
  (`*_reason_answer`).
- `transfer_<K>`: the small model's reasoning call with its decode truncated at K tokens under the `prefix`
  selector (`decode_ms` = the cumulative decode time of the first K reasoning tokens, measured per token in the
  shared full-length run; a standalone transfer stops there) + the large model's image+question prefix + the
  `large_branch` records of the smaller Ks' transfer prompts it continues (under the prefix selector the kept tokens
  of K are the first of the next K's: each transfer prefills the hint header and kept tokens once and the next K
  branches off there) + the large transfer call (prefill of the rest + decode). Other selectors pay the whole
  reasoning (and `attention` its scoring pass, `select_attention`). `transfer_all` keeps all reasoning tokens.
- On a ladder the same holds per model: `<m>_direct` of a model above the cheapest is built like `large_direct`
  (`<m>_prefix` + continuation), `transfer_<a>_<b>_<K|all>` like `transfer_<K>` with a reasoning and b answering,
  and its increment `latency_ms__escalate_<a>_<b>_<K|all>` leaves out `<b>_prefix`.
- `latency_ms__escalate_<K>` (`escalate_all` for `transfer_all`), the two-stage increment after `large_direct`
  answered (router contract): the same records as `transfer_<K>` minus the large prefix, which two-stage decoding
  reuses from `large_direct` (no second vision encoding or prompt prefill) = small reasoning (up to K tokens) +
  large continuation from the cached prefix (its branch records + the transfer call). Summed as if sequential.
Records marked `shared` are counted in every strategy that needs them (standalone means "as if run alone"); a record
marked `composed` is a measured record cut to what the strategy alone would have run.
"""
from __future__ import annotations

from typing import Callable, Mapping

from routedvlm.router.strategies import parse_strategy

StageCost = Callable[[str, dict], float]
PREFIX_STAGE = "large_prefix"


def wall_clock_stage_ms(side: str, record: dict) -> float:
    """The measured cost of one stage record: vision + prefill + decode milliseconds (`side` is unused)."""
    return float(record.get("vision_ms") or 0.0) + float(record.get("prefill_ms") or 0.0) + float(record.get("decode_ms") or 0.0)


def trace_ms(trace, stage_ms: StageCost = wall_clock_stage_ms, *, skip=()) -> float:
    """Sum of `stage_ms(record["model"], record)` over a trace, leaving out records whose stage is in `skip`."""
    return float(sum(stage_ms(r["model"], r) for r in trace if r["stage"] not in skip))


def compose_latencies(results: Mapping, stage_ms: StageCost | None = None) -> tuple[dict, dict]:
    """({strategy: standalone ms}, {escalate column key: increment ms}) for one sample's `run_many` results.

    results: {strategy id: Result (anything with a `.trace` list of stage records)}. The second dict is keyed
    by K (int) for `transfer_<K>` and by "all" for `transfer_all`, and by the strategy id for a ladder's other
    transfers (`transfer_<a>_<b>_<K|all>`, whose increment leaves out `<b>_prefix`), i.e. the `escalate_col` argument.
    """
    cost = stage_ms or wall_clock_stage_ms
    standalone, escalate = {}, {}
    for sid, res in results.items():
        standalone[sid] = trace_ms(res.trace, cost)
        strat = parse_strategy(sid)
        if strat.is_transfer and strat.id == sid and (strat.source, strat.model) != ("small", "large"):
            escalate[sid] = trace_ms(res.trace, cost, skip=(f"{strat.model}_prefix",))
        elif strat.is_transfer:
            key = "all" if strat.keep_tokens is None else strat.keep_tokens
            escalate[key] = trace_ms(res.trace, cost, skip=(PREFIX_STAGE,))
    return standalone, escalate

