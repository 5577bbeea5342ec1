"""A mixed ladder: local small, the served large model (OpenAIVLM over `routedvlm serve`) as mid, local large. Its
strategies answer as the all-local ladder of the same checkpoints, run_many shares per model, and records of the
served model name it `mid` with its own prefix-cache namespace stages."""
import pytest
from serve_helpers import KEY

Q = "How many boxes?"
IDS = ["small_direct", "mid_direct", "large_direct", "transfer_small_mid_4", "transfer_mid_large_4",
       "transfer_small_mid_all"]


@pytest.fixture(scope="module")
def ladders(tiny_pair, served, make_pipeline):
    from routedvlm.inference import VLM, CollaborativePipeline

    small, large = tiny_pair
    remote = VLM.from_openai(f"{served['url']}/v1", "large", api_key=KEY, timeout=120, require_prefix_cache=False)
    opts = dict(min_new_tokens=4, max_direct_tokens=6, max_reason_tokens=24, min_reason_tokens=12, k_grid=[4])
    return (CollaborativePipeline(sides=[small, remote, large], **opts),
            CollaborativePipeline(sides=[small, large, large], **opts))


def test_a_served_middle_model_answers_like_the_local_one(ladders, images):
    mixed, local = ladders
    many = mixed.run_many(images["square"], Q, IDS)
    for sid in IDS:
        ref = local.run(images["square"], Q, sid)
        assert many[sid].answer == ref.answer, sid
        assert mixed.run(images["square"], Q, sid).answer == ref.answer, sid
    mid_records = [r for r in many["transfer_small_mid_4"].trace if r["model"] == "mid"]
    assert [r["stage"] for r in mid_records] == ["mid_prefix", "mid_transfer"] and all(r["remote"] for r in mid_records)
    assert {r["model"] for r in many["transfer_mid_large_4"].trace} == {"mid", "large"}


def test_escalation_from_the_served_middle_model(ladders, images):
    mixed, local = ladders
    first = mixed.run(images["tall"], Q, "mid_direct")
    second = mixed.escalate(first, 4)
    assert second.strategy == "transfer_small_mid_4"
    assert second.answer == local.run(images["tall"], Q, "transfer_small_mid_4").answer
    assert [r["stage"] for r in second.trace] == ["mid_prefix", "mid_direct", "small_reason", "escalate"]


def test_measured_calls_of_a_middle_model_share_its_sample_namespace():
    from types import SimpleNamespace

    from routedvlm.inference.sides.openai import measurement_salt

    req = SimpleNamespace(_measure="ns")
    assert [measurement_salt(req, s) for s in ("mid_direct", "mid_transfer", "large_direct", "escalate")] == ["ns"] * 4
    assert all(measurement_salt(req, s) != "ns" for s in ("small_direct", "mid_reason", "mid_transfer_cold"))
