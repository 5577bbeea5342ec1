"""Toy world: generator determinism, split separation, exact traces, encoding parity, shipped checkpoints."""
import pathlib
import re

import numpy as np
import pytest

from routedvlm.data.toyworld import models as M
from routedvlm.data.toyworld import task
from routedvlm.data.toyworld.task import make_samples
from routedvlm.errors import ConfigError
from routedvlm.inference.prompts import PromptConfig

CKPT = pathlib.Path(task.__file__).parent / "checkpoints"


def _key(s):
    return tuple((b.slot, b.colour, b.value) for b in s.bars)


def test_same_seed_same_samples_and_other_seed_differs():
    a, b = make_samples("label", 50, seed=3), make_samples("label", 50, seed=3)
    assert [(_key(x), x.question, x.answer) for x in a] == [(_key(x), x.question, x.answer) for x in b]
    assert np.array_equal(np.asarray(a[0].image), np.asarray(b[0].image))
    c = make_samples("label", 50, seed=4)
    assert [_key(x) for x in a] != [_key(x) for x in c]


def test_splits_share_no_bar_configuration():
    keys = {sp: {_key(s) for s in make_samples(sp, 600, seed=0)} for sp in task.SPLITS}
    assert not keys["train"] & keys["label"]
    assert not keys["train"] & keys["eval"]
    assert not keys["label"] & keys["eval"]
    assert not keys["train"] & {_key(s) for s in make_samples("eval", 600, seed=1)}


def test_worked_example_trace_and_answer():
    bars = (task.Bar(0, "red", 7), task.Bar(2, "blue", 3), task.Bar(3, "red", 5), task.Bar(5, "blue", 9))
    assert task.trace(bars) == ("red=12. blue=2. 12*2=24.", "24")


@pytest.mark.parametrize("split", task.SPLITS)
def test_answers_equal_the_traces_final_values(split):
    for s in make_samples(split, 300, seed=0):
        assert task.final_value(s.reasoning) == s.answer
        red = sum(b.value for b in s.bars if b.colour == "red")
        blue = sum(b.colour == "blue" for b in s.bars)
        assert s.answer == str(red * blue) and red > 0 and blue > 0
        assert s.difficulty == len(s.bars) and s.question.startswith(f"{len(s.bars)} bars.")


def test_difficulty_is_spread_over_two_to_six_bars():
    diff = np.array([s.difficulty for s in make_samples("eval", 1000, seed=0)])
    counts = np.bincount(diff, minlength=7)[2:]
    assert counts.sum() == 1000 and counts.min() > 140 and counts.max() < 260
    hard = np.mean([s.hard for s in make_samples("eval", 1000, seed=0)])
    assert 0.3 < hard < 0.5


def test_unknown_split_is_rejected_with_the_options():
    with pytest.raises(ConfigError, match=r"^`split` must be 'eval', 'label' or 'train'; got 'test'"):
        make_samples("test", 3)


def test_image_pixels_encode_the_bars():
    s = make_samples("eval", 1, seed=0)[0]
    img = np.asarray(s.image)
    assert img.shape == (16, 96, 3)
    for b in s.bars:
        column = img[:, b.slot * 16 + 8]
        assert (column.any(axis=1)).sum() == task.bar_height(b.value)


def test_numpy_encoding_matches_processor_and_chat_template():
    tok, ip = M.build_tokenizer(), M.build_image_processor()
    samples = make_samples("eval", 4, seed=0)
    ref = ip([s.image for s in samples], return_tensors="np")
    assert np.array_equal(ref["pixel_values"], M.pixel_values([task.render(s.bars) for s in samples]))
    assert ref["image_grid_thw"].tolist() == [[1, 2, 12]] * 4
    for thinking in (True, False):
        text = tok.apply_chat_template(M.messages(samples[0].question), tokenize=False, add_generation_prompt=True,
                                       enable_thinking=thinking)
        assert text.replace("<|image_pad|>", "<|image_pad|>" * 6) == M.prompt_text(samples[0].question, thinking)
    assert len(M.char_ids(tok, "red=12.")) == 7


def test_transfer_items_use_the_pipeline_prompt_verbatim():
    from routedvlm.data.toyworld.train_models import corrupt_reasoning, make_item

    s = make_samples("train", 1, seed=0)[0]
    rng = np.random.default_rng(0)
    _, prompt, target, n_answer = make_item(s, "transfer", rng, corrupt=0.0)
    question = prompt.split("<|vision_end|>")[1].split("<|im_end|>")[0]
    hint = question.split("\nDraft reasoning: ")[1]
    assert question == PromptConfig().transfer_question(s.question, hint) and s.reasoning.startswith(hint)
    assert prompt.endswith("<think>\n\n</think>\n\n") and target == s.answer + "<|im_end|>" and n_answer == len(s.answer) + 1
    wrong = corrupt_reasoning(s.bars, rng)
    red, blue, prod = map(int, re.match(r"red=(\d+)\. blue=(\d+)\. \d+\*\d+=(\d+)\.", wrong).groups())
    assert wrong != s.reasoning and red * blue == prod


def test_write_dataset_round_trips(tmp_path):
    import io

    import pyarrow.parquet as pq
    from PIL import Image

    samples = make_samples("label", 5, seed=0)
    table = pq.read_table(task.write_dataset(samples, tmp_path / "toy.parquet"))
    assert {"sample_id", "image", "question", "answer", "difficulty"} <= set(table.column_names)
    row = table.slice(2, 1).to_pylist()[0]
    assert row["answer"] == samples[2].answer and row["sample_id"] == samples[2].sample_id
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(row["image"]))), task.render(samples[2].bars))


@pytest.fixture(scope="module")
def shipped():
    from routedvlm.data.toyworld.quick_eval import Side

    if not (CKPT / "small" / "config.json").exists():
        pytest.fail(f"shipped checkpoints missing under {CKPT}; run python -m routedvlm.data.toyworld.train_models")
    return {side: Side(CKPT / side) for side in ("small", "mid", "large")}


@pytest.mark.parametrize("side", ["small", "mid", "large"])
def test_shipped_checkpoint_answers_in_both_modes(shipped, side):
    from routedvlm.data.toyworld.quick_eval import split_output

    samples = [s for s in make_samples("eval", 40, seed=0) if s.difficulty == 2][:6]
    qs = [s.question for s in samples]
    direct = shipped[side].generate([s.image for s in samples], qs, False, 8)
    think = shipped[side].generate([s.image for s in samples], qs, True, 48)
    for d, t in zip(direct, think):
        assert re.fullmatch(r"\d+<\|im_end\|>.*", d, flags=re.S), d
        assert re.match(r"red=\d+\. blue=\d+\. \d+\*\d+=\d+\.\n</think>\n\n\d+<\|im_end\|>", t), t
    answers = [split_output(t, True)[1] for t in think]
    assert sum(a == s.answer for a, s in zip(answers, samples)) >= 4


def test_shipped_pair_answers_through_the_collaborative_pipeline():
    from routedvlm.inference import VLM, CollaborativePipeline

    small, large = VLM.from_pretrained(CKPT / "small"), VLM.from_pretrained(CKPT / "large")
    assert small.style == large.style == "hybrid"
    pipe = CollaborativePipeline(small, large, selector="prefix", k_grid=(4, 8, 16, 32), max_direct_tokens=8,
                                 max_reason_tokens=48)
    s = next(x for x in make_samples("eval", 20, seed=0) if x.difficulty == 2)
    res = pipe.run_many(s.image, s.question, ["small_direct", "small_reason", "large_direct", "large_reason",
                                               "transfer_8", "transfer_all"])
    assert res["small_reason"].reasoning.startswith("red=") and res["small_reason"].answer == s.answer
    assert re.fullmatch(r"\d+", res["large_direct"].answer)
    assert res["transfer_8"].kept_text == res["small_reason"].reasoning[:8]
    assert res["transfer_all"].kept_text.strip() == res["small_reason"].reasoning.strip()
    assert res["transfer_all"].answer == s.answer


def test_the_shipped_ladder_is_ordered_by_size_and_runs_through_the_ladder_pipeline():
    """Issue 30: `mid` sits between the two (layers, parameters) and takes the small model's reasoning."""
    import json

    from routedvlm.inference import VLM, CollaborativePipeline

    layers = [json.loads((CKPT / a / "config.json").read_text())["text_config"]["num_hidden_layers"]
              for a in ("small", "mid", "large")]
    assert layers == sorted(layers) and len(set(layers)) == 3
    sides = [VLM.from_pretrained(CKPT / a) for a in ("small", "mid", "large")]
    pipe = CollaborativePipeline.from_ladder(sides, selector="prefix", k_grid=(8,), max_direct_tokens=8,
                                             max_reason_tokens=48)
    assert pipe.aliases == ("small", "mid", "large")
    s = next(x for x in make_samples("eval", 20, seed=0) if x.difficulty == 2)
    res = pipe.run_many(s.image, s.question, ["mid_direct", "mid_reason", "transfer_small_mid_all",
                                               "transfer_mid_large_8"])
    assert res["mid_reason"].reasoning.startswith("red=") and res["mid_reason"].answer == s.answer
    assert re.fullmatch(r"\d+", res["mid_direct"].answer)
    assert res["transfer_small_mid_all"].answer == s.answer
    assert res["transfer_mid_large_8"].kept_text == res["mid_reason"].reasoning[:8]
