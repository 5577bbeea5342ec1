"""Hidden-state capture during the model's own generate calls: equal to a plain forward's hidden states, the same
through the labeller's shared-prefix path, off unless switched on, and layers validated."""
import numpy as np
import pytest

from routedvlm.errors import ConfigError

ARCHS = ["qwen2_vl", "qwen3_vl", "smolvlm"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    import torch

    from routedvlm.inference import VLM, build_tiny_vlm

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("hidden")
    return {a: VLM.from_pretrained(build_tiny_vlm(a, root / a, seed=0, size="tiny")) for a in ARCHS}


def _image():
    from PIL import Image

    return Image.new("RGB", (48, 32), (30, 160, 90))


@pytest.mark.parametrize("arch", ARCHS)
def test_capture_equals_the_hidden_states_of_a_plain_forward(tiny, arch):
    import torch

    from routedvlm.inference import CollaborativePipeline
    from routedvlm.inference.sides.local import stages
    from routedvlm.inference.sides.local.hidden import decoder_layers, disable_capture, enable_capture
    from routedvlm.inference.inputs import make_request

    vlm = tiny[arch]
    n = len(decoder_layers(vlm.model))
    enable_capture(vlm.model, list(range(n)))
    try:
        pipe = CollaborativePipeline(vlm, vlm, min_new_tokens=3, max_direct_tokens=4)
        result = pipe.run(_image(), "How many bars?", "large_direct")
    finally:
        disable_capture(vlm.model)
    hidden = result.generation.hidden
    assert hidden.layers == list(range(n))
    assert hidden.answer[0].shape == (result.generation.output_tokens - 1, hidden.prompt_last[0].shape[0])
    inputs = stages.direct_inputs(vlm, make_request(_image(), "How many bars?"))
    with torch.no_grad():
        ref = vlm.model(**inputs, output_hidden_states=True).hidden_states
    for layer in range(n - 1):  # hidden_states[i + 1] is decoder layer i's output; the last one is after the norm
        np.testing.assert_allclose(hidden.prompt_last[layer], ref[layer + 1][0, -1].numpy(), atol=1e-4, rtol=1e-4)


def test_the_labellers_shared_prefix_path_gives_the_same_vector(tiny):
    from routedvlm.inference import CollaborativePipeline
    from routedvlm.inference.sides.local.hidden import disable_capture, enable_capture

    vlm = tiny["qwen2_vl"]
    enable_capture(vlm.model, [-1])
    try:
        pipe = CollaborativePipeline(vlm, vlm, min_new_tokens=2, max_direct_tokens=4, max_reason_tokens=8, k_grid=(4,))
        alone = pipe.run(_image(), "Which bar is red?", "large_direct").generation.hidden
        shared = pipe.run_many(_image(), "Which bar is red?", ["large_direct", "transfer_4", "large_reason"])
    finally:
        disable_capture(vlm.model)
    again = shared["large_direct"].generation.hidden
    for position in ("prompt_last", "answer_mean", "all_mean"):
        np.testing.assert_allclose(again.vector(position), alone.vector(position), atol=1e-5, rtol=1e-5)


def test_no_capture_unless_switched_on(tiny):
    from routedvlm.inference import CollaborativePipeline

    vlm = tiny["qwen2_vl"]
    result = CollaborativePipeline(vlm, vlm, min_new_tokens=1).run(_image(), "Any bars?", "large_direct")
    assert result.generation.hidden is None


def test_layers_and_positions_are_validated(tiny):
    from routedvlm.inference.sides.local.hidden import HiddenStates, enable_capture

    with pytest.raises(ConfigError, match=r"^Hidden-state layers must be integers in \[-2, 1\] for this 2-layer"):
        enable_capture(tiny["qwen2_vl"].model, [5])
    states = HiddenStates([0], {0: np.ones(3)}, {0: np.zeros((0, 3))})
    with pytest.raises(ConfigError, match=r"^The hidden-state position must be one of"):
        states.vector("middle")
    np.testing.assert_array_equal(states.vector("answer_mean"), np.ones(3))  # a one-token answer: the prompt's
