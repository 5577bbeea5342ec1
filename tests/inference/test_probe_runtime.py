"""RoutedVLM with a LoRA probe router: the probe shares the small model's small_direct prefill when that stage runs
(same P(correct) as its own pass), and the trace says whether it did and what the probe cost."""
import pytest

from routedvlm.router import Policy

FEATURES = ["feat__prompt__question_words", "feat__large_direct__first_token_entropy"]
STRATEGIES = ["large_direct", "transfer_8", "large_reason"]
COSTS = {"large_direct": 0.0, "transfer_8": 50.0, "large_reason": 500.0}


@pytest.fixture(scope="module")
def probe_parts(tmp_path_factory):
    """(small checkpoint = the probe's base, large checkpoint, a probe net on the base with a perturbed adapter)."""
    import torch

    from routedvlm.inference import build_tiny_vlm
    from routedvlm.router.lora_probe import ProbeNet, load_base

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("probe-runtime")
    small = build_tiny_vlm("qwen2_vl", root / "small", seed=0, size="tiny")
    large = build_tiny_vlm("qwen2_vl", root / "large", seed=1, size="tiny")
    net = ProbeNet(load_base(small), STRATEGIES, FEATURES, lora_r=2, seed=0)
    with torch.no_grad():
        for name, p in net.vlm.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3)
    return small, large, net


def _routed(probe_parts, paid):
    import copy

    from routedvlm.inference import VLM, CollaborativePipeline
    from routedvlm.inference.routed import RoutedVLM
    from routedvlm.router.checkpoints import weights_hash
    from routedvlm.router.lora_probe import LoRAProbeRouter

    small, large, net = probe_parts
    net = copy.deepcopy(net)  # RoutedVLM makes the probe adopt its small model
    policy = Policy(router_type="lora-probe", strategies=STRATEGIES, mode="cascade", paid_stages=paid,
                    features=FEATURES, expected_cost_ms=COSTS, tau=0.5, fallback="large_reason",
                    params={"base_model": str(small), "base_hash": weights_hash(small)})
    pipe = CollaborativePipeline(VLM.from_pretrained(small), VLM.from_pretrained(large), min_new_tokens=2,
                                 max_direct_tokens=4, max_reason_tokens=12, k_grid=(8,))
    return RoutedVLM(pipe, LoRAProbeRouter(policy, net))


@pytest.mark.slow
@pytest.mark.parametrize("paid, shared", [(["large_direct", "small_direct"], True), (["large_direct"], False)])
def test_probe_shares_the_small_direct_prefill(probe_parts, paid, shared):
    from PIL import Image

    vlm = _routed(probe_parts, paid)
    image, question = Image.new("RGB", (48, 32), (190, 40, 60)), "How many red bars are there?"
    out = vlm.generate(image=image, question=question)
    record = out.decision
    assert record["fallback"] is False and record["error"] is None
    assert record["probe_shared_prefill"] is shared and record["probe_ms"] > 0
    stages = [r["stage"] for r in out.trace]
    assert stages.count("small_direct") == (1 if shared else 0)
    # the shared pass gives the same P(correct) as the probe's own prefill of the same prompt
    own = vlm.router.decide({**record["features"], "image": image, "question": question})
    assert vlm.router.trace_info()["probe_shared_prefill"] is False
    assert out.p_correct == pytest.approx(own.p_correct, abs=1e-5)
    assert out.strategy == own.strategy


@pytest.mark.parametrize("arch", ["qwen2_vl", "qwen3_vl", "smolvlm", "llava_onevision"])
def test_shared_hidden_equals_own_prefill(arch, tmp_path):
    """Re-feeding the last prompt token on the small model's small_direct cache (adapter off there) gives the
    probe's own adapted prefill, on every architecture."""
    import torch
    from PIL import Image

    from routedvlm.inference import VLM, build_tiny_vlm
    from routedvlm.inference.inputs import Request
    from routedvlm.inference.pipeline_parts import PipelineConfig
    from routedvlm.router.lora_probe import ProbeNet, SharedPrefill, load_base

    path = build_tiny_vlm(arch, tmp_path / arch, seed=0, size="tiny")
    small, net = VLM.from_pretrained(path), ProbeNet(load_base(path), STRATEGIES, [], lora_r=2, seed=0)
    with torch.no_grad():
        for name, p in net.vlm.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    image, question = Image.new("RGB", (64, 64), (200, 10, 10)), "What color is it?"
    with torch.inference_mode():
        own = net.hidden(net.encode(image, question))
        with net.peft.disable_adapter():
            base = net.hidden(net.encode(image, question))
    gen, _, _ = small.run_direct("small", Request(image, question), PipelineConfig(max_direct_tokens=4, min_new_tokens=3))
    rope = getattr(small.model.model, "rope_deltas", None)
    shared = SharedPrefill(gen.cache, gen.prefill_tokens + gen.cached_tokens, None if rope is None else rope.clone())
    with torch.inference_mode():
        via_cache = net.shared_hidden(shared, question)
    assert (own - base).abs().max() > 0.1  # the adapter matters ...
    assert torch.allclose(via_cache, own, atol=1e-5)  # ... and the shared pass still equals the own prefill


@pytest.mark.slow
def test_probe_follows_the_small_model_dtype(probe_parts, tmp_path):
    """A bfloat16 small model: the probe casts itself to match, so the shared pass still works."""
    import copy

    import torch
    from PIL import Image

    from routedvlm.inference import VLM, CollaborativePipeline
    from routedvlm.inference.routed import RoutedVLM
    from routedvlm.router.checkpoints import weights_hash
    from routedvlm.router.lora_probe import LoRAProbeRouter

    small, large, net = probe_parts
    net = copy.deepcopy(net)
    policy = Policy(router_type="lora-probe", strategies=STRATEGIES, mode="cascade",
                    paid_stages=["large_direct", "small_direct"], features=FEATURES, expected_cost_ms=COSTS, tau=0.5,
                    fallback="large_reason", params={"base_model": str(small), "base_hash": weights_hash(small)})
    pipe = CollaborativePipeline(VLM.from_pretrained(small, dtype="bfloat16"), VLM.from_pretrained(large),
                                 min_new_tokens=2, max_direct_tokens=4, max_reason_tokens=12, k_grid=(8,))
    vlm = RoutedVLM(pipe, LoRAProbeRouter(policy, net))
    image, question = Image.new("RGB", (48, 32), (10, 140, 60)), "How many green bars are there?"
    out = vlm.generate(image=image, question=question)
    assert out.decision["error"] is None and out.decision["probe_shared_prefill"] is True
    assert net.vlm.model.dtype == torch.bfloat16
    own = vlm.router.decide({**out.decision["features"], "image": image, "question": question})
    assert out.p_correct == pytest.approx(own.p_correct, abs=0.03)  # bfloat16 rounding


def test_head_only_probe_round_trip(probe_parts, tmp_path):
    """lora_r=0: no adapter folder; load_router rebuilds the same head-only probe."""
    from PIL import Image

    from routedvlm.router import load_router
    from routedvlm.router.checkpoints import weights_hash
    from routedvlm.router.lora_probe import LoRAProbeRouter, ProbeNet, load_base

    small = probe_parts[0]
    policy = Policy(router_type="lora-probe", strategies=STRATEGIES, mode="one-shot", features=[],
                    expected_cost_ms=COSTS, tau=0.5, fallback="large_reason",
                    params={"base_model": str(small), "base_hash": weights_hash(small)})
    router = LoRAProbeRouter(policy, ProbeNet(load_base(small), STRATEGIES, [], lora_r=0, seed=1))
    folder = router.save(tmp_path / "head-only")
    assert not (folder / "adapter").exists() and router.policy.params["adapter"] is None
    loaded = load_router(folder)
    sample = {"image": Image.new("RGB", (40, 24), (0, 90, 200)), "question": "Which bar is tallest?"}
    assert loaded.net.peft is None and loaded.decide(sample) == router.decide(sample)


@pytest.mark.slow
def test_probe_shares_the_small_model_weights(probe_parts, tmp_path):
    """RoutedVLM's small model carries the probe's adapter (off for its own generations, which are unchanged) and the
    probe's own copy is released; P(correct) and a save -> load round trip are unchanged."""
    import torch
    from PIL import Image

    from routedvlm.router import load_router

    vlm = _routed(probe_parts, ["large_direct", "small_direct"])
    image, question = Image.new("RGB", (48, 32), (30, 90, 160)), "How many blue bars are there?"
    features = {FEATURES[0]: 5.0, FEATURES[1]: 0.3, "image": image, "question": question}
    before_p = vlm.router.decide(features).p_correct
    before = vlm.pipeline.run(image, question, "small_direct").generation
    assert vlm.router.net.vlm is not vlm.pipeline.small
    vlm.generate(image=image, question=question)
    assert vlm.router.net.vlm is vlm.pipeline.small and vlm.router.net.peft is None
    after = vlm.pipeline.run(image, question, "small_direct").generation
    assert after.token_ids == before.token_ids and torch.equal(after.first_logits, before.first_logits)
    assert vlm.router.decide(features).p_correct == pytest.approx(before_p, abs=1e-5)
    loaded = load_router(vlm.router.save(tmp_path / "adopted"))
    assert loaded.decide(features).p_correct == pytest.approx(before_p, abs=1e-5)
