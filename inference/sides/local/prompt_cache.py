"""A per-sample prefix cache of one model keyed by prompt token ids (a small prompt trie), used by `run_many`.

`PromptCache.generate` continues a prompt from the cached prompt that shares the longest token-id prefix with it
(a copy of that KV cache cropped there, the Qwen-VL rope offset restored), prefills only the rest and decodes.
Its prefill stops at every point where an announced `upcoming` prompt will branch off, so each span a later
prompt reuses is one measured call with its own trace record. A generation returns the records of every span its
prompt was built from (reused ones marked `shared`): its standalone cost stays the sum of its records. The image
is encoded once per cache; its features serve a prompt that shares nothing past the image.
Only local (transformers) models; token ids are compared, never assumed from text.
"""
from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass

from .generation import Generation, rope_owner, common_prefix_len, encode_images, timed_generate
from .stages import record

_SEQ_KEYS = ("input_ids", "attention_mask", "mm_token_type_ids", "token_type_ids")
_CALLS = itertools.count()  # process-wide ids of model calls; records that appear in several traces share one


@dataclass
class Span:
    """Prompt tokens [start, end) prefilled by one model call whose trace record is `record`."""

    start: int
    end: int
    record: dict


@dataclass
class Entry:
    """A cached prompt: its token ids, a KV cache holding at least them, the rope offset, the spans that built it,
    and how many leading ids may be reused (all of a prefix; all but the last of a prompt whose call decoded)."""

    ids: list
    cache: object
    rope: object
    spans: list
    reusable: int


class PromptCache:
    """The prompts one model ran for one sample. side: "small"/"large" (trace records' `model`)."""

    def __init__(self, vlm, side: str):
        self.vlm, self.side, self.model = vlm, side, vlm.model
        self.image_token_id = getattr(vlm.processor, "image_token_id", None)
        self.entries: list[Entry] = []
        self.features = None  # (mm_encoder_outputs, vision_ms) of the sample's image once encoded

    def seed(self, ids, cache, rope, rec: dict) -> dict:
        """Register a prompt prefix cached elsewhere (the CachedPrefix prefix) as one span; returns its record."""
        rec = _stamp(rec)
        self.entries.append(Entry(list(ids), cache, rope, [Span(0, len(ids), rec)], len(ids)))
        return rec

    def image_end(self, ids) -> int:
        """Index after the prompt's last image token (0 without one): a reused prefix must reach at least here."""
        if self.image_token_id is None or self.image_token_id not in ids:
            return 0
        return len(ids) - ids[::-1].index(self.image_token_id)

    def lookup(self, ids) -> tuple[Entry | None, int]:
        """The cached prompt sharing the longest prefix with `ids` and how many tokens to reuse (0: none).

        At least one token of `ids` is left to prefill, and at most all but the last token of a prompt that was
        decoded from are reused (that token came with the decoding call), so reuse ends where `cuts` split."""
        best, n = None, 0
        for entry in self.entries:
            m = min(common_prefix_len(entry.ids, ids), len(ids) - 1, entry.reusable)
            if m > n:
                best, n = entry, m
        return (best, n) if best is not None and n >= max(self.image_end(ids), 1) else (None, 0)

    def cuts(self, ids, start: int, upcoming) -> list[int]:
        """Where upcoming prompts branch off `ids` after `start` (each will reuse exactly up to its cut)."""
        lo = max(start, self.image_end(ids) - 1)
        found = {min(common_prefix_len(ids, u), len(u) - 1, len(ids) - 1) for u in upcoming}
        return sorted(c for c in found if c > lo)

    def generate(self, inputs: dict, stage: str, mode: str, *, max_new_tokens: int, min_new_tokens: int = 0,
                 upcoming=(), eos_token_id=None) -> tuple[Generation, list]:
        """Run one prompt (model inputs) through the cache: (generation, trace records of all its spans).

        upcoming: token id lists of prompts this model will run next for the sample; the prefill is split where
        they branch off (records `<side>_prefix` for a first span with the image, `<side>_branch` after it).
        """
        ids = inputs["input_ids"][0].tolist()
        upcoming = [u[0].tolist() if hasattr(u, "dim") else list(u) for u in upcoming]
        entry, start = self.lookup(ids)
        spans = _reused_spans(entry, start) if entry is not None else []
        cache = _copy_prefix(entry.cache, start) if entry is not None else None
        rope = entry.rope if entry is not None else None
        for cut in self.cuts(ids, start, upcoming):
            sliced = {k: (v[:, :cut] if k in _SEQ_KEYS else v) for k, v in inputs.items()}
            gen, rope = self._call(sliced, cache, rope, max_new_tokens=1)
            seg = Generation([], [], float("nan"), [], gen.vision_ms, gen.prefill_ms, 0.0, gen.prefill_tokens, start)
            name = f"{self.side}_prefix" if start == 0 else f"{self.side}_branch"
            spans.append(Span(start, cut, _stamp(record(name, self.side, self.vlm, "prefix", seg), shared=True)))
            cache, start = gen.cache, cut
        gen, rope = self._call(inputs, cache, rope, max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens,
                               eos_token_id=eos_token_id)
        spans.append(Span(start, len(ids), _stamp(record(stage, self.side, self.vlm, mode, gen))))
        self.entries.append(Entry(ids, gen.cache, rope, spans, len(ids) - 1))
        return gen, [sp.record if i == len(spans) - 1 else dict(sp.record, shared=True) for i, sp in enumerate(spans)]

    def _call(self, inputs, cache, rope, **kwargs):
        """One timed generate call from `cache` (None: cold, the image encoded once); returns (gen, rope offset)."""
        owner = rope_owner(self.model)
        if cache is not None:
            if owner is not None:
                owner.rope_deltas = None if rope is None else rope.clone()
            return timed_generate(self.model, inputs, cache=cache, **kwargs), rope
        if self.features is None:
            _, mm, ms = encode_images(self.model, inputs)
            self.features = (mm, ms)
            features = self.features
        else:
            features = (self.features[0], 0.0)
        gen = timed_generate(self.model, inputs, features=features, **kwargs)
        return gen, (None if owner is None or owner.rope_deltas is None else owner.rope_deltas.clone())


def _stamp(rec: dict, **extra) -> dict:
    rec.update(extra, call=rec.get("call") or f"c{next(_CALLS)}")
    return rec


def _reused_spans(entry: Entry, n: int) -> list[Span]:
    """The spans of `entry` covering its first n tokens; a span cut short, or one that also decoded, is reused as
    a composed record: its prefill pro-rated by tokens, no decode (exact in tokens, an estimate in ms)."""
    out = []
    for sp in entry.spans:
        if sp.start >= n:
            break
        rec, end = sp.record, min(sp.end, n)
        if end < sp.end or rec.get("decode_tokens") or rec.get("decode_ms"):
            part = (end - sp.start) / (sp.end - sp.start)
            rec = dict(rec, prefill_ms=round(rec["prefill_ms"] * part, 3), prefill_tokens=end - sp.start,
                       decode_ms=0.0, decode_tokens=0, composed=True)
        out.append(Span(sp.start, end, rec))
    return out


def _copy_prefix(cache, n: int):
    """A copy of a KV cache holding only its first n positions (the original is left as it is)."""
    out = copy.deepcopy(cache)
    if n < out.get_seq_length():
        out.crop(-(out.get_seq_length() - n))
    return out
