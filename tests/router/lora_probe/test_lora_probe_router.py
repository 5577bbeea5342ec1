"""Router type `lora-probe` (router/lora_probe/): at run time it reads the small model only through the model side's
public methods (`VLM.placement`, `VLM.rope_state`, `VLM.set_rope_state`), never by reaching into its modules."""
import types

import pytest


@pytest.mark.slow
def test_runtime_inputs_hand_over_the_small_models_prefill_through_public_methods(probe_router, monkeypatch):
    from routedvlm.router.lora_probe import SHARED_KEY, SharedPrefill

    small = probe_router.net.vlm  # RoutedVLM's small model is the probe's base: the prefill is shareable
    monkeypatch.setattr(small, "rope_state", lambda: "rope offsets of the small_direct prefill")
    gen = types.SimpleNamespace(cache="kv cache", prefill_tokens=5, cached_tokens=2)
    stages = {"small_direct": types.SimpleNamespace(generation=gen)}
    request = types.SimpleNamespace(image="image", question="How many?")
    out = probe_router.runtime_inputs(request, stages, types.SimpleNamespace(small=small))
    assert out["image"] == "image" and out["question"] == "How many?"
    shared = out[SHARED_KEY]
    assert isinstance(shared, SharedPrefill) and shared.cache == "kv cache" and shared.prompt_tokens == 7
    assert shared.rope_deltas == "rope offsets of the small_direct prefill"
    # without a small_direct pass there is nothing to share: the probe prefills the prompt itself
    assert SHARED_KEY not in probe_router.runtime_inputs(request, {}, types.SimpleNamespace(small=small))


@pytest.mark.slow
def test_the_small_models_rope_state_is_copied_out_and_back(probe_router):
    import torch

    vlm = probe_router.net.vlm
    assert vlm.placement == (vlm.model.device, vlm.model.dtype)
    offsets = torch.tensor([[3]])
    vlm.set_rope_state(offsets)
    saved = vlm.rope_state()
    assert torch.equal(saved, offsets) and saved is not offsets  # a copy: a later prefill cannot change it
    offsets += 1
    assert torch.equal(vlm.rope_state(), torch.tensor([[3]]))
    vlm.set_rope_state(None)
    assert vlm.rope_state() is None


@pytest.mark.slow
def test_a_served_small_model_is_read_through_the_same_methods(probe_router):
    """A served small side (no local weights: `placement` None) leaves the probe where it is, with nothing shared."""
    from routedvlm.inference.sides.http.side import OpenAIVLM
    from routedvlm.router.lora_probe import SHARED_KEY

    assert "placement" not in vars(OpenAIVLM)  # the ModelSide defaults apply: None, nothing to share
    served = types.SimpleNamespace(name="http://gpu:8000/v1#small", placement=None)
    before = probe_router.net.vlm.placement
    stages = {"small_direct": types.SimpleNamespace(generation=None)}
    out = probe_router.runtime_inputs(types.SimpleNamespace(image="image", question="Q?"), stages,
                                      types.SimpleNamespace(small=served))
    assert SHARED_KEY not in out and probe_router.net.vlm.placement == before
