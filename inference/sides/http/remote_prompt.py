"""The remote counterpart of `local/stages.CachedPrefix`: the large model's image+question prefix lives in the SERVER's cache.

Prompts are questions (the server renders them). `answer` sends one request; after this sample's `large_direct`
request, a request sharing its prefix must be reported as reusing some of it (`usage.prompt_tokens_details.
cached_tokens` > 0), else `BackendError` says which server flag is missing (vLLM caches whole `--block-size`
blocks only, so a prefix shorter than a block is never reused).

`transfer` is what the labeller's `run_many` sends for `transfer_<K>` (one record per call it measures):
- the two-stage call: the transfer prompt in a prefix-cache namespace of its own (vLLM `cache_salt`) that holds
  only the `large_direct` prompt (sent there first with `max_tokens=1`, unrecorded: another K's transfer prompt
  would share more blocks than the escalation after `large_direct` can), so the server reuses exactly the
  image+question blocks an escalation reuses: record `large_transfer` (prefill = the uncached tokens); this is
  what `latency_ms__escalate_<K>` counts. The sample's first transfer after its direct answer goes to the sample's
  own namespace, which holds only that direct prompt (no seed needed: one request fewer);
- the reused prefix as record `large_prefix` (`composed`): `prefill_tokens` = the tokens the server reused (and
  `n_images` = 1), with, when `vlm.measure_cold` (wall-clock labels), `prefill_ms` = the wall time of the same
  prompt sent cold (a fresh namespace: nothing reused) minus the two-stage call's. So the one-stage
  `latency_ms__transfer_<K>` is the cold call's measured time, and a fitted cost model prices both from tokens.
When the side is `priced` (the labeller's --cost) and this prompt `counts_reuse` (an engine that returns prompt token
ids: `engine_prompt.py`), every transfer goes to the sample's own namespace unseeded (only the work's requests are
sent) and its record counts as reused what the `large_direct` prompt alone would give it (the engine's count, capped).
"""
from __future__ import annotations

import itertools

from routedvlm.errors import BackendError, ModeUnavailableError

from ..results import Generation, record
from ...threads import parallel
from ..base import PromptPrefix


class RemotePrompt(PromptPrefix):
    """The image+question prefix of one request on the large model's server (see the module docstring)."""

    counts_reuse = False  # can say from token ids what an escalation reuses (`escalation_reuse`): an HTTP reply cannot

    def __init__(self, vlm, request, cfg, side: str):
        self.vlm, self.request, self.cfg, self.side = vlm, request, cfg, side
        self.direct_text = request.question
        self.direct_record, self.direct_gen, self._namespaces = None, None, itertools.count(1)  # thread-safe: transfers may overlap
        self.overlap = False  # send a transfer's cold repeat beside its two-stage calls (set by inference/overlap.py)
        self.prefix_record = record(f"{side}_prefix", side, vlm, "prefix", _empty(), remote=True)

    def transfer_text(self, reasoning: str) -> str:
        return self.vlm.prompts.transfer_question(self.request.question, reasoning)

    def answer(self, text: str, stage: str, *, restore_rope: bool = True, salt: str | None = None):
        """One request (`text` = the question or the transfer question): (generation, answer, record)."""
        gen, ans, rec = self.vlm.answer_cold(self.side, self.request, text, stage, self.cfg, salt=salt)
        if stage == f"{self.side}_direct":
            self.direct_record, self.direct_gen = rec, gen
        elif self.direct_record is not None and self.vlm.require_prefix_cache:
            self._check_reuse(rec, stage)
        return gen, ans, rec

    def transfer(self, text: str):
        """The two-stage transfer call and the record of the prefix it reused: (generation, answer, [prefix, call])."""
        base, salt = self.request.__dict__.get("_measure"), None

        def two_stage():
            if salt is not None and salt != base:
                self.vlm.answer_cold(self.side, self.request, self.direct_text, f"{self.side}_prefix_seed", self.cfg,
                                     salt=salt, max_tokens=1)
            return self.answer(text, f"{self.side}_transfer", salt=salt)

        jobs = {"warm": two_stage}
        counted = self.counts_reuse and getattr(self.vlm, "priced", False) and self.direct_record is not None
        if base is not None:
            n = next(self._namespaces)
            # the first transfer after the direct answer: the sample's namespace holds just that prompt, no seed; a
            # priced run sends every transfer there and counts the reuse from token ids (`_count_reuse`)
            salt = base if (n == 1 or counted) and self.direct_record is not None else f"{base}-k{n}"
            if self.vlm.measure_cold:
                jobs["cold"] = lambda: self.vlm.answer_cold(self.side, self.request, text, f"{self.side}_transfer_cold",
                                                            self.cfg)
        done = parallel(jobs, self.overlap)  # at once only where latencies are batched anyway (inference/overlap.py)
        gen, ans, rec = done["warm"]
        if counted:
            self._count_reuse(gen, rec)
        cold_ms = None
        if "cold" in done:
            cold, cold_ans, cold_rec = done["cold"]
            cold_ms = _ms(cold_rec)
            if cold_ans != ans:
                rec["cold_answer"] = cold_ans
        prefix = Generation([], [], float("nan"), [], 0.0, max((cold_ms or 0.0) - _ms(rec), 0.0), 0.0,
                            int(rec["cached_tokens"]), 0)
        extra = {"remote": True, "composed": True, "n_images": 1, "shared": True}
        if rec.get("image_tokens"):
            extra["image_tokens"] = rec["image_tokens"]
        if cold_ms is not None:
            extra["cold_ms"] = round(cold_ms, 3)
        return gen, ans, [record(f"{self.side}_prefix", self.side, self.vlm, "prefix", prefix, **extra), rec]

    def escalation_reuse(self, gen) -> int | None:
        """Tokens of `gen`'s prompt an escalation right after `large_direct` reuses; None when unknown."""
        return None

    def _count_reuse(self, gen, rec: dict) -> None:
        """Cap the two-stage call's reuse at what the `large_direct` prompt alone gives (another K's transfer in the
        same namespace may share more), so a priced run records the tokens a seeded namespace records."""
        reuse, cached = self.escalation_reuse(gen), int(rec["cached_tokens"])
        if reuse is not None and cached > reuse:
            rec["prefill_tokens"], rec["cached_tokens"] = int(rec["prefill_tokens"]) + cached - reuse, reuse
            gen.prefill_tokens, gen.cached_tokens = rec["prefill_tokens"], reuse

    def _check_reuse(self, rec: dict, stage: str) -> None:
        url, model = self.vlm.client.base_url, self.vlm.model_id
        off = ("or pass require_prefix_cache=False to VLM.from_openai (environment: ROUTEDVLM_REQUIRE_PREFIX_CACHE=0) "
               "to accept escalations without measured reuse.")
        if rec.get("cache_report") is False:
            raise BackendError(
                f"The OpenAI-compatible server {url} reports no prompt-token details for the {stage} request of "
                f"{model!r} (usage.prompt_tokens_details.cached_tokens), so the escalation's reuse of the cached "
                f"prefix cannot be measured. Start vLLM with --enable-prompt-tokens-details (SGLang: "
                f"--enable-cache-report), {off}")
        if int(rec.get("cached_tokens") or 0) == 0:
            prompt = int(self.direct_record["prefill_tokens"]) + int(self.direct_record["cached_tokens"])
            raise BackendError(
                f"The OpenAI-compatible server {url} reused none of the prefix that the {stage} request of {model!r} "
                f"shares with this sample's large_direct request ({prompt} prompt tokens): its prefix cache is off, "
                f"or its cache blocks are longer than the shared prefix. Start vLLM with --enable-prefix-caching and "
                f"a --block-size below the shared prefix length (the CPU build accepts multiples of 32), {off}")

    def attention_scores(self, reasoning: str):
        raise ModeUnavailableError(
            f"The attention selector needs the large model's attention weights, which {self.vlm.name!r} does not "
            "expose over HTTP. Use selector='prefix' or 'suffix' with remote models."
        )


def _empty() -> Generation:
    return Generation([], [], float("nan"), [], 0.0, 0.0, 0.0, 0, 0)


def _ms(rec: dict) -> float:
    return float(rec["vision_ms"]) + float(rec["prefill_ms"]) + float(rec["decode_ms"])
