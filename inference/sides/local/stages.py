"""The stages of a local (transformers) side: a direct answer, a reasoning run, and the cached prompt prefix.

`sides/local/side.py` (`VLM`) calls these for its `ModelSide` stage methods; `record` and `ReasoningRun`, the types
every side returns, are `sides/results.py`'s. Each stage returns its generation(s) plus trace records (plain dicts, JSON-serialisable) with the keys
`stage`, `model`, `checkpoint`, `mode`, `vision_ms`, `prefill_ms`, `prefill_tokens`, `cached_tokens`,
`decode_ms`, `decode_tokens`.
"""
from __future__ import annotations

import copy

from ..base import PromptPrefix
from ..results import Generation, ReasoningRun, record  # noqa: F401 - every side's result types, kept importable here
from .generation import cache_kwarg, common_prefix_len, continue_from, prefill_prefix, timed_generate


def direct_inputs(vlm, request) -> dict:
    """Model inputs of the direct-mode prompt of a request."""
    return vlm.encode(request.image, vlm.render(request.messages(), "direct"))


def reason_text(vlm, request) -> str:
    """The reasoning-mode prompt text of a request (`vlm` serves the reasoning mode)."""
    return vlm.render(request.messages(vlm.question_for(request.question, "reason")), "reason")


def reason_inputs(vlm, request) -> dict:
    """Model inputs of the reasoning-mode prompt of a request."""
    return vlm.encode(request.image, reason_text(vlm, request))


def _generate(vlm, side, inputs, stage, mode, cache, upcoming, **kwargs) -> tuple[Generation, list]:
    """(generation, trace records): one cold call, or through a `PromptCache` (reused spans + new ones + this call)."""
    if cache is not None:
        return cache.generate(inputs, stage, mode, upcoming=upcoming, **kwargs)
    gen = timed_generate(vlm.model, inputs, **kwargs)
    return gen, [record(stage, side, vlm, mode, gen)]


def direct_answer(vlm, side: str, request, cfg, *, cache=None, upcoming=(), inputs=None):
    """A short answer in direct mode (thinking off), optionally through a PromptCache: (generation, answer, records)."""
    inputs = direct_inputs(vlm, request) if inputs is None else inputs
    gen, records = _generate(vlm, side, inputs, f"{side}_direct", vlm.mode_name("direct"), cache, upcoming,
                             max_new_tokens=cfg.max_direct_tokens, min_new_tokens=cfg.min_new_tokens)
    return gen, vlm.clean_answer(gen.token_ids), records


def reasoning_run(side_vlm, side: str, request, cfg, max_tokens: int, *, cache=None, upcoming=(),
                  inputs=None) -> ReasoningRun:
    """Reason for at most `max_tokens` tokens (`side_vlm.reasoning_side()` serves the mode). cache: a PromptCache
    of that model (then `records` also lists the prefix spans reused or split off for `upcoming` prompts)."""
    vlm = side_vlm.reasoning_side()
    inputs = reason_inputs(vlm, request) if inputs is None else inputs
    gen, records = _generate(vlm, side, inputs, f"{side}_reason", vlm.mode_name("reason"), cache, upcoming,
                             max_new_tokens=max_tokens, min_new_tokens=min(cfg.min_reason_tokens, max_tokens))
    rids, rtext, answer = vlm.split_reasoning(gen.token_ids)
    records[-1]["reasoning_tokens"] = len(rids)
    return ReasoningRun(vlm, side, gen, inputs["input_ids"], rids, rtext, answer, records, inputs=inputs,
                        rope=_rope(vlm.model))


def finish_answer(run: ReasoningRun, cfg) -> ReasoningRun:
    """Make sure a reasoning run has an answer: if it stopped inside its reasoning, its side closes it and decodes one."""
    return run if run.answer is not None else run.vlm.finish_answer(run, cfg)


def close_reasoning(run: ReasoningRun, cfg) -> ReasoningRun:
    """Close a local reasoning run that stopped inside its reasoning, continuing its KV cache, and decode its answer."""
    import torch

    from .generation import PrefixState

    vlm, gen = run.vlm, run.gen
    body = gen.token_ids if gen.token_ids and gen.token_ids[-1] not in vlm.eos_ids() else gen.token_ids[:-1]
    close = vlm.text_ids(vlm.close_text())
    dev = run.prompt_ids.device
    ids = torch.cat([run.prompt_ids, torch.tensor([body + close], device=dev)], dim=1)
    prefix_ids = torch.cat([run.prompt_ids, torch.tensor([gen.token_ids], device=dev)], dim=1)[:, : gen.cache.get_seq_length()]
    state = PrefixState(prefix_ids, gen.cache, run.rope, 0.0, 0.0)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if "mm_token_type_ids" in run.inputs:
        mm = run.inputs["mm_token_type_ids"]
        inputs["mm_token_type_ids"] = torch.cat([mm, torch.zeros((1, ids.shape[1] - mm.shape[1]), dtype=mm.dtype, device=dev)], 1)
    ans = continue_from(vlm.model, state, inputs, max_new_tokens=cfg.max_direct_tokens, min_new_tokens=cfg.min_new_tokens)
    run.answer, run.answer_gen = vlm.clean_answer(ans.token_ids), ans
    run.records.append(record(f"{run.side}_reason_answer", run.side, vlm, vlm.mode_name("reason"), ans))
    return run


def answer_cold(vlm, side: str, request, question: str, stage: str, cfg) -> tuple[Generation, str, dict]:
    """A cold direct answer of the answering model `side` to `question` about the request's image (one-stage
    transfer)."""
    text = vlm.render(request.messages(question), "direct")
    gen = timed_generate(vlm.model, vlm.encode(request.image, text), max_new_tokens=cfg.max_direct_tokens,
                         min_new_tokens=cfg.min_new_tokens)
    return gen, vlm.clean_answer(gen.token_ids), record(stage, side, vlm, vlm.mode_name("direct"), gen)


def _rope(model):
    inner = getattr(model, "model", None)
    deltas = getattr(inner, "rope_deltas", None)
    return None if deltas is None else deltas.clone()


class CachedPrefix(PromptPrefix):
    """The answering model's cached [chat header + image + question] prefix (a `PromptPrefix`), shared by
    `<side>_direct` and every transfer to `side`; other prompts with the same image are built by splicing token ids
    (no image preprocessing or encoding again)."""

    def __init__(self, vlm, request, cfg, side: str):
        self.vlm, self.request, self.cfg, self.side = vlm, request, cfg, side
        self.direct_text = vlm.render(request.messages(), "direct")
        self.direct_inputs = vlm.encode(request.image, self.direct_text)
        self._base_u = vlm.text_ids(self.direct_text)
        self._offset = self.direct_inputs["input_ids"].shape[1] - len(self._base_u)
        self._last_img = -1
        self._splice_ok = self._check_splice()
        probes = [self.transfer_text(r) for r in ("a", "b")]
        shared = min(common_prefix_len(self._base_u, vlm.text_ids(t)) for t in probes)
        self.prefix = prefill_prefix(vlm.model, self.direct_inputs, shared + self._offset)
        self.prefix_record = record(f"{side}_prefix", side, vlm, "prefix", _prefix_gen(self.prefix))

    def transfer_text(self, reasoning: str) -> str:
        question = self.vlm.prompts.transfer_question(self.request.question, reasoning)
        return self.vlm.render(self.request.messages(question), "direct")

    def _check_splice(self) -> bool:
        img_id = getattr(self.vlm.processor, "image_token_id", None)
        base_e = self.direct_inputs["input_ids"][0].tolist()
        if img_id is None or img_id not in self._base_u:
            return False
        last = len(self._base_u) - 1 - self._base_u[::-1].index(img_id)
        self._last_img = last
        return base_e[last + 1 + self._offset:] == self._base_u[last + 1:]

    def inputs_for(self, text: str) -> dict:
        """Model inputs for another prompt with the same image (spliced ids; the processor as fallback)."""
        import torch

        new_u = self.vlm.text_ids(text)
        n_u = common_prefix_len(self._base_u, new_u)
        if not self._splice_ok or n_u <= self._last_img:
            return self.vlm.encode(self.request.image, text)
        cut = n_u + self._offset
        base = self.direct_inputs
        dev = base["input_ids"].device
        tail = torch.tensor([new_u[n_u:]], dtype=base["input_ids"].dtype, device=dev)
        ids = torch.cat([base["input_ids"][:, :cut], tail], 1)
        out = {k: v for k, v in base.items() if k not in ("input_ids", "attention_mask", "mm_token_type_ids")}
        out.update(input_ids=ids, attention_mask=torch.ones_like(ids))
        if "mm_token_type_ids" in base:
            mm = base["mm_token_type_ids"][:, :cut]
            out["mm_token_type_ids"] = torch.cat([mm, torch.zeros_like(tail, dtype=mm.dtype)], 1)
        return out

    def answer(self, text: str, stage: str, *, restore_rope: bool = True) -> tuple[Generation, str, dict]:
        """Continue the cached prefix with a prompt; returns (generation, answer, record)."""
        gen = continue_from(self.vlm.model, self.prefix, self.inputs_for(text), max_new_tokens=self.cfg.max_direct_tokens,
                            min_new_tokens=self.cfg.min_new_tokens, restore_rope=restore_rope)
        return gen, self.vlm.clean_answer(gen.token_ids), record(stage, self.side, self.vlm, self.vlm.mode_name("direct"), gen)

    def attention_scores(self, reasoning: str):
        """Attention from the answering model's answer position to each token of `reasoning` in the transfer
        prompt (mean over heads and layers): (token ids of the reasoning span, scores, record)."""
        import time

        import torch

        full = self.inputs_for(self.transfer_text(reasoning))["input_ids"]
        empty = self.inputs_for(self.transfer_text(""))["input_ids"]
        start = common_prefix_len(full, empty)
        tail = common_prefix_len(full[0].flip(0)[None], empty[0].flip(0)[None])
        end = max(start, full.shape[1] - tail)
        model, owner = self.vlm.model, getattr(self.vlm.model, "model", None)
        cache = copy.deepcopy(self.prefix.cache)
        n = min(start, cache.get_seq_length())
        if n < cache.get_seq_length():
            cache.crop(-(cache.get_seq_length() - n))
        if owner is not None and hasattr(owner, "rope_deltas"):
            owner.rope_deltas = None if self.prefix.rope_deltas is None else self.prefix.rope_deltas.clone()
        previous = model.config._attn_implementation
        t0 = time.perf_counter()
        model.set_attn_implementation("eager")
        try:
            with torch.inference_mode():
                out = model(input_ids=full[:, n:], **{cache_kwarg(model): cache}, use_cache=True,
                            output_attentions=True)
        finally:
            model.set_attn_implementation(previous)
        ms = (time.perf_counter() - t0) * 1000
        att = torch.stack([a[0, :, -1, :].float().mean(0) for a in out.attentions]).mean(0)
        scores = att[start:end].tolist()
        gen = Generation([], [], float("nan"), [], 0.0, ms, 0.0, full.shape[1] - n, n)
        rec = record("select_attention", self.side, self.vlm, "attention", gen)
        return full[0, start:end].tolist(), scores, rec


def _prefix_gen(prefix) -> Generation:
    return Generation([], [], float("nan"), [], prefix.vision_ms, prefix.prefill_ms, 0.0, prefix.length, 0)
