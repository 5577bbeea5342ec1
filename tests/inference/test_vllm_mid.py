"""Against REAL vLLM servers on the toy ladder (`make vllm-env vllm-up`; marked `vllm`, run by `make test-vllm`): the
third toy model `mid` (issue 30) is servable by vLLM's CPU build, and its answers over vLLM equal the local
transformers backend's, alone and as the reasoner whose draft the large model takes (a pipeline over mid + large)."""
import pytest

pytestmark = pytest.mark.vllm
STRATEGIES = ["small_direct", "small_reason", "transfer_8", "transfer_all"]  # small = mid in this pair


def test_mid_over_vllm_answers_as_the_local_backend(vllm_mid_server, vllm_servers):
    from routedvlm.data.toyworld.make_labels import MAX_DIRECT_TOKENS, MAX_REASON_TOKENS, TOY_K_GRID, checkpoint_pair
    from routedvlm.data.toyworld.task import make_samples
    from routedvlm.inference import VLM, CollaborativePipeline
    from routedvlm.inference.sides import load_side as connect

    _, large = checkpoint_pair()
    mid = large.parent / "mid"
    kw = dict(selector="prefix", k_grid=TOY_K_GRID, max_direct_tokens=MAX_DIRECT_TOKENS,
              max_reason_tokens=MAX_REASON_TOKENS)
    local = CollaborativePipeline(VLM.from_pretrained(mid), VLM.from_pretrained(large), **kw)
    remote = CollaborativePipeline(connect(vllm_mid_server), connect(vllm_servers["large"]), **kw)
    for s in make_samples("eval", 12, seed=13):
        a, b = local.run_many(s.image, s.question, STRATEGIES), remote.run_many(s.image, s.question, STRATEGIES)
        assert [b[x].answer for x in STRATEGIES] == [a[x].answer for x in STRATEGIES]
        assert b["small_reason"].reasoning == a["small_reason"].reasoning
