"""Thinking on/off per model family: hybrid template, thinking-only, no thinking mode, reasoner checkpoint."""
import pytest

from routedvlm.errors import ModeUnavailableError

MSG = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Which?"}]}]


def test_hybrid_template_switches_thinking(tiny_vlm):
    vlm = tiny_vlm("qwen3_vl")
    assert vlm.style == "hybrid"
    assert vlm.render(MSG, "reason").endswith("<|im_start|>assistant\n<think>\n")
    assert vlm.render(MSG, "direct").endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert vlm.mode_name("direct") == "no_think" and vlm.mode_name("reason") == "think"


def test_thinking_only_checkpoint_gets_empty_think_block_for_direct(tiny_vlm):
    vlm = tiny_vlm("qwen3_vl", True)
    assert vlm.style == "always"
    assert vlm.render(MSG, "reason").endswith("assistant\n<think>\n")
    assert vlm.render(MSG, "direct").endswith("assistant\n<think>\n\n</think>\n\n")


def test_no_thinking_mode_reasons_from_a_prompt(tiny_vlm, make_pipeline, images):
    vlm = tiny_vlm("qwen2_vl")
    assert vlm.style == "never"
    assert vlm.question_for("Which?", "reason").endswith(vlm.prompts.reason_suffix)
    assert "<think>" not in vlm.render(MSG, "reason")
    res = make_pipeline(vlm, vlm).run(images["square"], "Which?", "small_reason")
    assert res.trace[0]["mode"] == "prompt"


def test_think_block_is_parsed_and_stripped(tiny_vlm):
    vlm = tiny_vlm("qwen3_vl")
    ids = vlm.text_ids("two red boxes</think>\n\nAnswer B<|im_end|>")
    rids, rtext, answer = vlm.split_reasoning(ids)
    assert rtext == "two red boxes" and answer == "Answer B"
    assert vlm.decode(rids) == "two red boxes"
    unfinished = vlm.split_reasoning(vlm.text_ids("still thinking"))
    assert unfinished[1] == "still thinking" and unfinished[2] is None
    assert vlm.clean_answer("<think>\nx\n</think>\n\n B. ") == "B."


def test_prompt_reasoning_is_split_at_the_answer_marker(tiny_vlm):
    vlm = tiny_vlm("qwen2_vl")
    _, rtext, answer = vlm.split_reasoning(vlm.text_ids("3 bars, so 3. Answer: 3"))
    assert rtext == "3 bars, so 3. " and answer == "3"


def test_unfinished_reasoning_is_closed_to_get_an_answer(tiny_vlm, make_pipeline, images):
    vlm = tiny_vlm("qwen3_vl")
    res = make_pipeline(vlm, vlm, max_reason_tokens=8, min_reason_tokens=8).run(images["square"], "Which?", "small_reason")
    stages = [r["stage"] for r in res.trace]
    assert res.reasoning_generation.output_tokens == 8
    if vlm.think_close_id in res.reasoning_generation.token_ids:
        assert stages == ["small_reason"]
    else:
        assert stages == ["small_reason", "small_reason_answer"]
        assert res.trace[1]["cached_tokens"] > res.trace[0]["prefill_tokens"]
        assert res.trace[1]["vision_ms"] == 0


def test_reasoner_checkpoint_serves_the_reasoning_mode(tiny_vlm, make_pipeline, images):
    from routedvlm.inference import VLM

    thinker = tiny_vlm("qwen3_vl", True)
    answerer = VLM.from_pretrained(tiny_vlm("qwen3_vl", False).name, reasoner=thinker)
    assert answerer.style == "never" and answerer.reasoning_side() is thinker
    pipe = make_pipeline(answerer, answerer)
    reason = pipe.run(images["square"], "Which?", "large_reason")
    direct = pipe.run(images["square"], "Which?", "large_direct")
    assert reason.trace[0]["checkpoint"] == thinker.name and reason.trace[0]["mode"] == "think"
    assert direct.trace[-1]["checkpoint"] == answerer.name and direct.trace[-1]["mode"] == "direct"


def test_missing_reasoning_mode_is_reported_not_faked(tiny_vlm, make_pipeline, images):
    base = tiny_vlm("qwen2_vl")
    from routedvlm.inference import VLM

    strict = VLM(base.model, base.processor, base.tokenizer, name="strict", reason_prompt=False)
    pipe = make_pipeline(strict, strict)
    with pytest.raises(ModeUnavailableError, match=r"^'strict' has no reasoning mode"):
        pipe.run(images["square"], "Which?", "small_reason")
    with pytest.raises(ModeUnavailableError):
        pipe.run(images["square"], "Which?", "transfer_16")
    assert pipe.run(images["square"], "Which?", "small_direct").answer is not None
