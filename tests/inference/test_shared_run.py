"""run_many's shared work: the per-model prompt cache (prompt trie), branching at each K, truthful trace records."""
import functools
from types import SimpleNamespace

import pytest

Q = "How many boxes?"
K_GRID = (4, 8, 16)


@pytest.fixture(scope="module")
def pipe(tiny_pair, make_pipeline):
    return make_pipeline(*tiny_pair, k_grid=K_GRID)


@pytest.fixture(scope="module")
def strategies():
    from routedvlm.router.strategies import default_strategies

    return default_strategies(K_GRID)


@pytest.fixture(scope="module")
def many(pipe, images, strategies):
    return pipe.run_many(images["square"], Q, strategies)


def _close(a, b, atol=1e-4):
    import torch

    keep = torch.isfinite(a) & torch.isfinite(b)
    return bool(torch.equal(torch.isfinite(a), torch.isfinite(b)) and torch.allclose(a[keep], b[keep], atol=atol))


def _per_model(trace):
    """{model: (prompt tokens prefilled, tokens decoded, records that ran the vision encoder)}."""
    out = {}
    for r in trace:
        p, d, v = out.get(r["model"], (0, 0, 0))
        out[r["model"]] = (p + r["prefill_tokens"], d + r["decode_tokens"], v + (r["vision_ms"] > 0))
    return out


def test_run_many_equals_run_for_every_default_strategy(pipe, images, many, strategies):
    """Same answers and tokens as independent runs, and each trace accounts for the same work a run does:
    per model the same prompt tokens prefilled (in several calls), the same tokens decoded, one vision encoding."""
    assert list(many) == strategies
    for sid in strategies:
        alone = pipe.run(images["square"], Q, sid)
        assert many[sid].answer == alone.answer and many[sid].generation.token_ids == alone.generation.token_ids, sid
        assert _close(many[sid].generation.first_logits, alone.generation.first_logits), sid
        assert _per_model(many[sid].trace) == _per_model(alone.trace), sid
        assert many[sid].latency_ms == sum(r["vision_ms"] + r["prefill_ms"] + r["decode_ms"] for r in many[sid].trace)


def test_transfers_branch_at_each_k(pipe, many):
    """transfer_<K_i+1> continues the cache of [prefix + hint header + kept tokens of K_i], and those token ids
    really are a prefix of its prompt."""
    from routedvlm.inference.sides.local.generation import common_prefix_len

    lp = many["large_direct"].handoff.large_prompt
    ids = {k: lp.inputs_for(lp.transfer_text(many[f"transfer_{k}"].kept_text))["input_ids"] for k in (*K_GRID, "all")}
    prefix_len = lp.prefix.length
    order = [*K_GRID, "all"]
    for prev, nxt in zip(order, order[1:]):
        a, b = many[f"transfer_{prev}"].trace, many[f"transfer_{nxt}"].trace
        branches_a = [r["call"] for r in a if r["stage"] == "large_branch"]
        assert [r["call"] for r in b if r["stage"] == "large_branch"][: len(branches_a)] == branches_a
        own = [r for r in b if r["model"] == "large" and r["call"] not in {x.get("call") for x in a}]
        assert own[0]["cached_tokens"] == common_prefix_len(ids[prev], ids[nxt]) > prefix_len
        assert own[-1]["stage"] == "large_transfer" and not any(r.get("shared") for r in own[-1:])
    for k in order:
        large = [r for r in many[f"transfer_{k}"].trace if r["model"] == "large"]
        assert large[0]["stage"] == "large_prefix" and large[-1]["stage"] == "large_transfer"
        assert large[-1]["vision_ms"] == 0 and not any(r.get("composed") for r in large)
        assert sum(r["prefill_tokens"] for r in large) == ids[k].shape[1]


def test_one_checkpoint_serving_both_modes_shares_its_prefix(many):
    small_direct, small_reason = many["small_direct"].trace, many["small_reason"].trace
    assert small_direct[0]["stage"] == small_reason[0]["stage"] == "small_prefix"
    assert small_direct[0]["call"] == small_reason[0]["call"] and small_direct[0]["vision_ms"] > 0
    assert small_direct[1]["cached_tokens"] == small_direct[0]["prefill_tokens"] and small_direct[1]["vision_ms"] == 0
    large_direct, large_reason = many["large_direct"].trace, many["large_reason"].trace
    assert [r["call"] for r in large_direct[:2]] == [r["call"] for r in large_reason[:2]]
    assert [r["stage"] for r in large_reason[:3]] == ["large_prefix", "large_branch", "large_reason"]


def test_vision_encoder_runs_once_per_model(pipe, images, strategies, monkeypatch):
    calls = {"small": 0, "large": 0}
    for side in calls:
        base = getattr(pipe, side).model.base_model
        original = base.get_image_features

        def counting(*args, _side=side, _original=original, **kwargs):
            calls[_side] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(base, "get_image_features", functools.wraps(original)(counting))
    pipe.run_many(images["wide"], Q, strategies)
    assert calls == {"small": 1, "large": 1}


def test_run_many_then_escalate_equals_the_transfer(pipe, images, many):
    assert pipe.escalate(many["large_direct"], 8).answer == many["transfer_8"].answer


# ----- the prompt cache on its own ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def prompts(tiny_pair, images):
    from routedvlm.inference.inputs import make_request
    from routedvlm.inference.sides.local.stages import direct_inputs, reason_inputs

    large = tiny_pair[1]
    req = make_request(images["tall"], Q)
    return large, direct_inputs(large, req), reason_inputs(large, req)


def test_prompt_cache_worked_example(prompts):
    """A announces B: A's prefill is split where B branches off; B reuses exactly that span and equals a cold run."""
    from routedvlm.inference.sides.local.generation import common_prefix_len, timed_generate
    from routedvlm.inference.sides.local.prompt_cache import PromptCache

    large, a, b = prompts
    cache = PromptCache(large, "large")
    cut = min(common_prefix_len(a["input_ids"], b["input_ids"]), b["input_ids"].shape[1] - 1)
    gen_a, rec_a = cache.generate(a, "large_direct", "no_think", max_new_tokens=4, min_new_tokens=4,
                                  upcoming=[b["input_ids"]])
    assert [r["stage"] for r in rec_a] == ["large_prefix", "large_direct"]
    assert rec_a[0]["prefill_tokens"] == cut and rec_a[0]["vision_ms"] > 0 and rec_a[0]["decode_tokens"] == 0
    assert rec_a[1]["cached_tokens"] == cut and rec_a[1]["prefill_tokens"] == a["input_ids"].shape[1] - cut
    gen_b, rec_b = cache.generate(b, "large_reason", "think", max_new_tokens=6, min_new_tokens=6)
    assert rec_b[0] == rec_a[0] and rec_b[0]["shared"]
    assert rec_b[1]["cached_tokens"] == cut and rec_b[1]["vision_ms"] == 0
    cold = timed_generate(large.model, b, max_new_tokens=6, min_new_tokens=6)
    assert gen_b.token_ids == cold.token_ids and _close(gen_b.first_logits, cold.first_logits)


def test_unannounced_prompt_reuses_a_pro_rated_share(prompts):
    """Without the announcement B still reuses the longest common prefix; the call it cuts into is listed as a
    composed record: its prefill pro-rated by tokens, without its decode."""
    from routedvlm.inference.sides.local.generation import common_prefix_len
    from routedvlm.inference.sides.local.prompt_cache import PromptCache

    large, a, b = prompts
    cache = PromptCache(large, "large")
    _, rec_a = cache.generate(a, "large_direct", "no_think", max_new_tokens=4, min_new_tokens=4)
    _, rec_b = cache.generate(b, "large_reason", "think", max_new_tokens=4, min_new_tokens=4)
    n = min(common_prefix_len(a["input_ids"], b["input_ids"]), b["input_ids"].shape[1] - 1)
    share, own = rec_b
    assert share["composed"] and share["call"] == rec_a[0]["call"] and share["prefill_tokens"] == n
    assert share["prefill_ms"] == round(rec_a[0]["prefill_ms"] * (n / a["input_ids"].shape[1]), 3)
    assert share["decode_ms"] == 0 and share["decode_tokens"] == 0 and share["vision_ms"] == rec_a[0]["vision_ms"]
    assert own["cached_tokens"] == n and own["vision_ms"] == 0


def test_lookup_compares_token_ids_and_keeps_the_image_whole():
    """Reuse stops at the first differing id (text that decodes alike may tokenize differently at a boundary)
    and only past the image's last token; a decoded prompt's last token is never reused."""
    from routedvlm.inference.sides.local.prompt_cache import Entry, PromptCache

    img = 9
    cache = PromptCache(SimpleNamespace(model=None, processor=SimpleNamespace(image_token_id=img)), "large")
    cache.entries = [Entry([1, img, img, 2, 3, 4], None, None, [], 5), Entry([1, img, 7, 7], None, None, [], 4)]
    entry, n = cache.lookup([1, img, img, 2, 5, 6])
    assert entry is cache.entries[0] and n == 4
    assert cache.lookup([1, img, img, 2, 3, 4, 8])[1] == 5  # all but the decoded prompt's last token
    assert cache.lookup([1, img, img, img, 2]) == (None, 0)  # shares only part of its image
    assert cache.image_end([1, img, img, 2]) == 3 and cache.image_end([1, 2]) == 0
    assert cache.cuts([1, img, img, 2, 3, 4, 5], 0, [[1, img, img, 2, 8], [1, img, 5], [1, img, img, 2, 3, 4, 5]]) == [4, 6]


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["qwen2_vl", "smolvlm", "llava_onevision"])
def test_run_many_equals_run_on_other_architectures(tiny_vlm, make_pipeline, images, arch):
    """The prompt cache compares token ids, so it also works where reasoning comes from a prompt suffix
    (checkpoints without a thinking mode) and where the image is not a run of one placeholder token."""
    vlm = tiny_vlm(arch)
    pipe = make_pipeline(vlm, vlm, k_grid=(4, 8), max_reason_tokens=16, min_reason_tokens=12)
    ids = ["small_direct", "large_direct", "small_reason", "large_reason", "transfer_4", "transfer_8", "transfer_all"]
    many = pipe.run_many(images["square"], Q, ids)
    for sid in ids:
        alone = pipe.run(images["square"], Q, sid)
        assert many[sid].answer == alone.answer and many[sid].generation.token_ids == alone.generation.token_ids, sid
        assert _per_model(many[sid].trace) == _per_model(alone.trace), sid
    assert any(r["stage"] == "large_branch" for r in many["transfer_8"].trace)


@pytest.mark.parametrize("selector", ["suffix", "attention"])
def test_run_many_equals_run_with_other_selectors(tiny_pair, make_pipeline, images, selector):
    """Kept tokens are not nested under these selectors: transfers still share what their ids share."""
    pipe = make_pipeline(*tiny_pair, selector=selector, k_grid=(4, 8))
    ids = ["large_direct", "transfer_4", "transfer_8", "transfer_all"]
    many = pipe.run_many(images["wide"], Q, ids)
    for sid in ids:
        alone = pipe.run(images["wide"], Q, sid)
        assert many[sid].answer == alone.answer and many[sid].kept_text == alone.kept_text, sid
        large = [r for r in many[sid].trace if r["model"] == "large" and r["stage"] != "select_attention"]
        assert sum(r["prefill_tokens"] for r in large) == large[-1]["prefill_tokens"] + large[-1]["cached_tokens"]
