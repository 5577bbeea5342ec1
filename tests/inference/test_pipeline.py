"""CollaborativePipeline: every strategy, selectors, two-stage reuse, stale rope state, run_many, policy."""
import functools
import json

import pytest

from routedvlm.errors import ConfigError, ImageLoadError, InputError, RoutedVLMError, UnknownStrategyError

Q = "How many boxes?"
TRACE_KEYS = {"stage", "model", "vision_ms", "prefill_ms", "prefill_tokens", "cached_tokens", "decode_ms", "decode_tokens"}
STRATEGIES = ["small_direct", "large_direct", "small_reason", "large_reason", "transfer_8", "transfer_all"]


@pytest.fixture(scope="module")
def pipe(tiny_pair, make_pipeline):
    return make_pipeline(*tiny_pair)


def _close(a, b, atol=1e-4):
    import torch

    keep = torch.isfinite(a) & torch.isfinite(b)
    return bool(torch.equal(torch.isfinite(a), torch.isfinite(b)) and torch.allclose(a[keep], b[keep], atol=atol))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_returns_a_result_with_a_trace(pipe, images, strategy):
    res = pipe.run(images["square"], Q, strategy)
    assert res.strategy == strategy and isinstance(res.answer, str) and res.answer
    assert all(TRACE_KEYS <= set(r) for r in res.trace)
    assert {r["model"] for r in res.trace} <= {"small", "large"}
    json.dumps(res.to_dict())
    transferred = strategy.startswith("transfer_")
    assert (res.keep_tokens is not None) == transferred
    assert (res.reasoning is not None) == (transferred or strategy.endswith("_reason"))
    assert res.generation.output_tokens == len(res.token_logprobs) and res.first_token_entropy >= 0
    assert res.trace[0]["vision_ms"] > 0


def test_prefix_selector_stops_the_small_model_after_k(pipe, images):
    res = pipe.run(images["square"], Q, "transfer_8")
    assert res.reasoning_generation.output_tokens <= 8 and res.keep_tokens <= 8
    assert res.trace[0]["decode_tokens"] <= 8


def test_selectors_worked_example():
    from routedvlm.inference.selectors import SELECTORS

    scores = [0.1, 0.9, 0.3, 0.8, 0.2]
    assert SELECTORS["prefix"](5, 2) == [0, 1]
    assert SELECTORS["suffix"](5, 2) == [3, 4]
    assert SELECTORS["attention"](5, 2, scores) == [1, 3]
    assert SELECTORS["attention"](5, 9, scores) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("selector", ["suffix", "attention"])
def test_full_reasoning_selectors_keep_k_tokens(tiny_pair, make_pipeline, images, selector):
    pipe = make_pipeline(*tiny_pair, selector=selector)
    res = pipe.run(images["square"], Q, "transfer_8")
    assert res.reasoning_generation.output_tokens > 8 and res.keep_tokens == 8
    if selector == "suffix":
        assert res.kept_text == tiny_pair[0].decode(res.handoff.reasoning_run.reasoning_ids[-8:])
    else:
        from routedvlm.inference.inputs import make_request
        from routedvlm.inference.selectors import select_attention
        from routedvlm.inference.sides.local.stages import CachedPrefix

        assert "select_attention" in [r["stage"] for r in res.trace]
        large = tiny_pair[1]
        ids, scores, _ = CachedPrefix(large, make_request(images["square"], Q), pipe.config, "large").attention_scores(res.reasoning)
        assert large.decode(ids) == res.reasoning  # the scored span is exactly the reasoning
        assert res.kept_text == large.decode([ids[i] for i in select_attention(len(ids), 8, scores)])


def test_escalation_reuses_the_prefix_and_equals_one_stage(pipe, images):
    first = pipe.run(images["square"], Q, "large_direct")
    two = pipe.escalate(first, 8)
    one = pipe.run(images["square"], Q, "transfer_8")
    assert two.answer == one.answer and two.generation.token_ids == one.generation.token_ids
    assert _close(two.generation.first_logits, one.generation.first_logits)
    esc, cold = two.trace[-1], one.trace[-1]
    prefix_len = first.trace[0]["prefill_tokens"]
    assert esc["stage"] == "escalate" and esc["vision_ms"] == 0 and esc["cached_tokens"] == prefix_len
    assert esc["prefill_tokens"] + esc["cached_tokens"] == cold["prefill_tokens"]
    assert cold["cached_tokens"] == 0 and cold["vision_ms"] > 0


def test_stale_rope_state_is_restored(pipe, images):
    """Negative control: without restoring rope_deltas after another image, first-step logits differ."""
    first = pipe.run(images["square"], Q, "large_direct")
    one = pipe.run(images["square"], Q, "transfer_8")
    pipe.run(images["wide"], Q, "large_direct")  # leaves the large model's rope_deltas of another image
    stale = pipe.escalate(first, 8, restore_rope=False)
    assert not _close(stale.generation.first_logits, one.generation.first_logits)
    pipe.run(images["tall"], Q, "large_direct")
    fresh = pipe.escalate(first, 8)
    assert _close(fresh.generation.first_logits, one.generation.first_logits)


def test_run_many_matches_run_and_shares_work(pipe, images):
    ids = ["small_direct", "large_direct", "small_reason", "transfer_8", "transfer_16", "transfer_all"]
    many = pipe.run_many(images["square"], Q, ids)
    assert list(many) == ids
    for sid in ["large_direct", "transfer_8", "transfer_16", "small_reason"]:
        assert many[sid].answer == pipe.run(images["square"], Q, sid).answer, sid
    t8 = many["transfer_8"].trace
    assert [r["stage"] for r in t8] == ["small_prefix", "small_reason", "large_prefix", "large_branch", "large_transfer"]
    assert all(r["shared"] for r in t8[:-1]) and not t8[-1].get("shared")
    assert t8[-1]["cached_tokens"] == t8[2]["prefill_tokens"] + t8[3]["prefill_tokens"]  # branch: header + kept tokens
    t16 = many["transfer_16"].trace
    assert t16[3]["call"] == t8[3]["call"] and t16[4]["stage"] == "large_branch"  # K=16 continues K=8's branch
    full = many["transfer_all"].reasoning_generation
    if full.output_tokens > 8:
        assert t8[1]["composed"] and t8[1]["decode_tokens"] == 8
        assert t8[1]["decode_ms"] == round(full.token_times_ms[7], 3)
    assert many["transfer_all"].reasoning_generation is many["transfer_8"].reasoning_generation
    escalated = pipe.escalate(many["large_direct"], 8)
    assert escalated.answer == many["transfer_8"].answer


def test_chat_messages_are_accepted(pipe, images, tmp_path):
    path = tmp_path / "img.png"
    images["square"].save(path)
    msgs = [{"role": "user", "content": [{"type": "image", "image": str(path)}, {"type": "text", "text": Q}]}]
    assert pipe.run(messages=msgs, strategy="large_direct").answer == pipe.run(images["square"], Q, "large_direct").answer


def test_mutual_verification_accepts_or_escalates(tiny_pair, make_pipeline, images):
    from routedvlm.inference import MutualVerification
    from routedvlm.inference.answers import answers_agree, normalize_answer

    small, large = tiny_pair
    assert normalize_answer(" B. ") == normalize_answer("b") == "b"
    assert not answers_agree("?", "!") and answers_agree("Yes.", "yes") and not answers_agree("a", "b")
    same_pipe = make_pipeline(large, large)
    same = MutualVerification(same_pipe, check="small_direct", keep_tokens=8).run(images["square"], Q)
    expected = "accept" if normalize_answer(same_pipe.run(images["square"], Q, "large_direct").answer) else "escalate"
    assert same.trace[-1]["decision"] == expected
    if expected == "accept":
        assert same.strategy == "large_direct"
    mixed = make_pipeline(small, large)
    res = MutualVerification(mixed, check="small_reason", keep_tokens=8).run(images["square"], Q)
    agree = answers_agree(mixed.run(images["square"], Q, "large_direct").answer,
                          mixed.run(images["square"], Q, "small_reason").answer, Q)
    assert res.trace[-1]["decision"] == ("accept" if agree else "escalate")
    if not agree:
        assert res.strategy == "transfer_8" and res.answer == mixed.run(images["square"], Q, "transfer_8").answer
        assert [r["stage"] for r in res.trace].count("small_reason") == 1


def test_parallel_uses_threads_when_concurrent():
    import threading

    from routedvlm.inference.threads import parallel

    barrier = threading.Barrier(2, timeout=10)  # only passes if both calls run at the same time

    def job():
        barrier.wait()
        return threading.current_thread().name

    names = parallel({"a": job, "b": job}, True)
    assert names["a"] != names["b"]
    assert set(parallel({"a": lambda: threading.current_thread().name}, False).values()) == {threading.current_thread().name}


def test_parallel_reuses_its_threads_nests_and_waits_for_every_job_before_raising():
    """Regression: each call started a new thread per job (9 thread starts per sample with 128 samples in flight,
    a third of the labeller's own CPU on engine sides); now idle pool threads take the jobs, a job may call
    `parallel` itself (no cap to deadlock on), and a failure is raised only once the other jobs have ended."""
    import threading
    import time

    from routedvlm.inference.threads import parallel

    def inner():
        return parallel({"x": lambda: threading.current_thread().name, "y": lambda: 1}, True)["x"]

    existing = {t.name for t in threading.enumerate()}  # earlier tests may have left idle threads in the shared pool
    names = set()
    for _ in range(30):
        names.update(set(parallel({"a": inner, "b": inner, "c": lambda: None}, True).values()) - {None})
    assert len(names - existing) <= 8  # 30 x 3 nested calls ran on a handful of reused threads, not ~90 new ones

    ended = []

    def slow():
        time.sleep(0.2)
        ended.append("slow")
        return 1

    def bad():
        raise ValueError("first")

    def worse():
        raise KeyError("second")

    with pytest.raises(ValueError, match="first"):
        parallel({"slow": slow, "bad": bad, "worse": worse}, True)
    assert ended == ["slow"]


# ----- bad input ---------------------------------------------------------------------------------------------
def test_missing_image_file(pipe, tmp_path):
    with pytest.raises(ImageLoadError, match=r"^The `image` file .*missing.png' does not exist"):
        pipe.run(tmp_path / "missing.png", Q, "small_direct")


def test_unreadable_image_file(pipe, tmp_path):
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not an image")
    with pytest.raises(ImageLoadError, match=r"^The `image` file .*bad.png' cannot be read as an image") as info:
        pipe.run(bad, Q, "small_direct")
    assert isinstance(info.value, ValueError) and isinstance(info.value, RoutedVLMError)


@pytest.mark.parametrize("question", ["", "   ", None])
def test_empty_question(pipe, images, question):
    with pytest.raises(InputError, match=r"^The `question` parameter must be a non-empty string"):
        pipe.run(images["square"], question, "small_direct")


@pytest.mark.parametrize("k", [0, -3, 2.5, True])
def test_keep_tokens_must_be_positive(pipe, images, k):
    first = pipe.run(images["square"], Q, "large_direct")
    with pytest.raises(InputError, match=r"^The `keep_tokens` parameter must be a positive integer"):
        pipe.escalate(first, k)


def test_escalate_needs_a_large_direct_result(pipe, images):
    res = pipe.run(images["square"], Q, "small_direct")
    with pytest.raises(InputError, match=r"^escalate needs a 'large_direct' Result"):
        pipe.escalate(res, 8)


def test_results_carry_their_handoff_as_a_declared_field(pipe, images):
    """What escalate continues from travels in `Result.handoff`, a declared field (no private attributes set from
    outside the class): large_direct hands over the large model's prompt, small_reason its reasoning run."""
    import dataclasses

    from routedvlm.inference import Handoff, Result

    assert not [f.name for f in dataclasses.fields(Result) if f.name.startswith("_")]
    first = pipe.run(images["square"], Q, "large_direct")
    reasoning = pipe.run(images["square"], Q, "small_reason")
    assert first.handoff.large_prompt is not None and first.handoff.reasoning_run is None
    assert reasoning.handoff.reasoning_run is not None and reasoning.handoff.large_prompt is None
    reused = pipe.escalate(first, 8, reasoning=reasoning)
    assert reused.answer == pipe.run(images["square"], Q, "transfer_8").answer
    stripped = dataclasses.replace(first, handoff=Handoff())
    with pytest.raises(InputError, match=r"^escalate needs a 'large_direct' Result"):
        pipe.escalate(stripped, 8)


@pytest.mark.parametrize("sid", ["transfer_0", "medium_direct", "transfer_-4"])
def test_unknown_strategy_names_the_valid_ids(pipe, images, sid):
    with pytest.raises(UnknownStrategyError, match=r"^Unknown strategy id .* Valid ids are 'large_direct', 'large_reason'"):
        pipe.run(images["square"], Q, sid)


def test_unknown_selector_and_bad_config(tiny_pair, make_pipeline):
    with pytest.raises(ConfigError, match=r"^The `selector` parameter must be one of 'attention', 'prefix' or 'suffix'"):
        make_pipeline(*tiny_pair, selector="random")
    with pytest.raises(ConfigError, match=r"^The `max_direct_tokens` field of PipelineConfig must be a positive integer"):
        make_pipeline(*tiny_pair, max_direct_tokens=0)


class _CannedPipeline:
    """A stand-in pipeline whose strategies return fixed answers (for the policy's decision logic)."""

    concurrent = False

    def __init__(self, answers):
        self.answers, self.escalated = answers, []

    def run_strategy(self, req, strat):
        from routedvlm.inference import Result

        return Result(self.answers[strat.id], strat.id, None, None, [{"stage": strat.id}])

    def escalate(self, result, keep, reasoning=None):
        from routedvlm.inference import Result

        self.escalated.append((keep, reasoning.strategy if reasoning else None))
        return Result("escalated", f"transfer_{keep}", keep, "r", [*result.trace, {"stage": "escalate"}])


@pytest.mark.parametrize("small, decision", [("b", "accept"), ("C", "escalate"), ("", "escalate")])
def test_mutual_verification_decision_worked_example(images, small, decision):
    from routedvlm.inference import MutualVerification

    pipe = _CannedPipeline({"large_direct": "B.", "small_reason": small})
    res = MutualVerification(pipe, check="small_reason", keep_tokens=16).run(images["square"], Q)
    assert res.trace[-1]["decision"] == decision
    assert res.answer == ("B." if decision == "accept" else "escalated")
    assert pipe.escalated == ([] if decision == "accept" else [(16, "small_reason")])
    assert res.trace[0]["stage"] == "small_reason"


def test_mutual_verification_rejects_bad_settings():
    from routedvlm.inference import MutualVerification

    with pytest.raises(ConfigError, match=r"^The `check` parameter of MutualVerification must be one of 'small_direct' or 'small_reason'"):
        MutualVerification(None, check="large_reason")
    with pytest.raises(InputError, match=r"^The `keep_tokens` parameter must be a positive integer"):
        MutualVerification(None, keep_tokens=0)


def test_run_many_concurrent_stage_one_matches_sequential(tiny_pair, make_pipeline, images, monkeypatch):
    """With the models on different devices stage one runs in two threads; the answers do not change."""
    from routedvlm.inference import CollaborativePipeline

    pipe = make_pipeline(*tiny_pair)
    ids = ["large_direct", "transfer_8"]
    sequential = {k: v.answer for k, v in pipe.run_many(images["square"], Q, ids).items()}
    monkeypatch.setattr(CollaborativePipeline, "concurrent", property(lambda self: True))
    assert pipe.concurrent
    assert {k: v.answer for k, v in pipe.run_many(images["square"], Q, ids).items()} == sequential


def test_import_is_light():
    import subprocess
    import sys

    code = "import sys, routedvlm.inference as i; i.__all__; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_escalation_does_not_encode_the_image_again(pipe, images, monkeypatch):
    first = pipe.run(images["square"], Q, "large_direct")
    base = pipe.large.model.base_model
    calls = []
    original = base.get_image_features

    @functools.wraps(original)
    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(base, "get_image_features", counting)
    pipe.escalate(first, 8)
    assert calls == []
    pipe.run(images["square"], Q, "large_direct")
    assert calls == [1]


def test_transfer_hint_sits_inside_the_user_turn(tiny_pair):
    from routedvlm.inference.inputs import make_request
    from routedvlm.inference.pipeline_parts import PipelineConfig
    from routedvlm.inference.sides.local.stages import CachedPrefix

    large = tiny_pair[1]
    lp = CachedPrefix(large, make_request(__import__("PIL.Image").Image.new("RGB", (64, 64)), Q), PipelineConfig(), "large")
    text = lp.transfer_text("two boxes")
    assert (Q + large.prompts.hint_template.format(reasoning="two boxes") + "<|im_end|>") in text
    assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert lp.prefix.length == lp.direct_inputs["input_ids"].shape[1] - len(large.text_ids("<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"))
