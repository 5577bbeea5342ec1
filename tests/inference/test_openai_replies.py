"""Reading vLLM-shaped chat replies: reasoning/answer split with or without a reasoning parser and with the think
tags as special tokens; usage counts; the reuse check of escalations; cache_salt namespaces. Offline (fake client)."""
import pytest

from routedvlm.inference.sides.http.openai_replies import direct_text, split_reasoning, usage_counts

# the toy large model's thinking reply, as vLLM 0.32 returns it in three configurations (tokens from logprobs)
TOKENS = list("red=13. blue=2. 13*2=26.\n") + ["</think>", "\n", "\n", "2", "6", "<|im_end|>"]
SHAPES = {
    "no parser, special tags dropped": {"content": "red=13. blue=2. 13*2=26.\n\n\n26"},
    "no parser, skip_special_tokens false": {"content": "red=13. blue=2. 13*2=26.\n</think>\n\n26"},
    "reasoning parser": {"content": "\n\n26", "reasoning_content": "red=13. blue=2. 13*2=26.\n"},
    "reasoning parser, newer field name": {"content": "26", "reasoning": "red=13. blue=2. 13*2=26.\n"},
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_reasoning_and_answer_split_the_same_way_in_every_server_configuration(shape):
    assert split_reasoning(SHAPES[shape], TOKENS) == ("red=13. blue=2. 13*2=26.\n", "26")


def test_a_reply_that_never_closed_its_reasoning_is_still_reasoning():
    toks = list("red=13. blue")
    assert split_reasoning({"content": "red=13. blue"}, toks) == ("red=13. blue", None)
    assert split_reasoning({"content": None, "reasoning_content": "red=13. blue"}, toks) == ("red=13. blue", None)


def test_without_logprobs_the_text_tags_still_split():
    assert split_reasoning({"content": "<think>\nab\n</think>\n\n7"}, []) == ("\nab\n", "7")


def test_direct_answers_survive_a_parser_that_files_them_as_reasoning():
    toks = ["2", "6", "<|im_end|>"]
    assert direct_text({"content": "26"}, toks) == "26"
    assert direct_text({"content": None, "reasoning_content": "26"}, toks) == "26"
    assert direct_text({"content": "", "reasoning": " 26 "}, toks) == "26"


def test_usage_counts_distinguish_zero_cached_from_not_reported():
    assert usage_counts({"usage": {"prompt_tokens": 66, "prompt_tokens_details": {"cached_tokens": 32}}}) == (66, 32)
    assert usage_counts({"usage": {"prompt_tokens": 66, "prompt_tokens_details": {"cached_tokens": 0}}}) == (66, 0)
    assert usage_counts({"usage": {"prompt_tokens": 66, "prompt_tokens_details": None}}) == (66, None)
    assert usage_counts({"usage": {"prompt_tokens": 66}}) == (66, None)


class FakeClient:
    """Answers every chat request with '26' and the usage a server with the given cache behaviour reports."""

    base_url = "http://127.0.0.1:9/v1"

    def __init__(self, cached, details=True):
        self.cached, self.details, self.bodies, self.headers = cached, details, [], []

    def create(self, body, what="", headers=None):
        self.bodies.append(body)
        self.headers.append(headers or {})
        first = len(self.bodies) == 1
        usage = {"prompt_tokens": 66, "completion_tokens": 3}
        if self.details:
            usage["prompt_tokens_details"] = {"cached_tokens": 0 if first else self.cached}
        entries = [{"token": t, "logprob": -0.1, "top_logprobs": []} for t in ("2", "6", "<|im_end|>")]
        return {"choices": [{"message": {"content": "26"}, "finish_reason": "stop", "logprobs": {"content": entries}}],
                "usage": usage}


def _pipeline(client, **kw):
    from PIL import Image

    from routedvlm.inference.inputs import make_request
    from routedvlm.inference.pipeline_parts import PipelineConfig
    from routedvlm.inference.sides.http.side import OpenAIVLM

    vlm = OpenAIVLM(client, "toy-large", **kw)
    req = make_request(Image.new("RGB", (96, 16)), "2 bars. Red sum times blue count?")
    return vlm, req, vlm.prefix("large", req, PipelineConfig(max_direct_tokens=8))


def test_escalation_without_reuse_names_the_missing_server_flags():
    from routedvlm.errors import BackendError

    vlm, req, lp = _pipeline(FakeClient(cached=0))
    lp.answer(lp.direct_text, "large_direct")
    with pytest.raises(BackendError, match=r"^The OpenAI-compatible server http://127.0.0.1:9/v1 reused none of the "
                                           r"prefix that the escalate request of 'toy-large' shares .*--enable-prefix-caching"):
        lp.answer(lp.transfer_text("red=13."), "escalate")
    vlm, req, lp = _pipeline(FakeClient(cached=32, details=False))
    lp.answer(lp.direct_text, "large_direct")
    with pytest.raises(BackendError, match=r"^The OpenAI-compatible server .* reports no prompt-token details .*"
                                           r"--enable-prompt-tokens-details"):
        lp.answer(lp.transfer_text("red=13."), "escalate")


def test_the_reuse_check_can_be_turned_off_and_reports_the_cached_tokens(monkeypatch):
    vlm, req, lp = _pipeline(FakeClient(cached=0), require_prefix_cache=False)
    lp.answer(lp.direct_text, "large_direct")
    assert lp.answer(lp.transfer_text("red=13."), "escalate")[2]["cached_tokens"] == 0
    monkeypatch.setenv("ROUTEDVLM_REQUIRE_PREFIX_CACHE", "0")
    assert _pipeline(FakeClient(cached=0))[0].require_prefix_cache is False
    _, _, lp = _pipeline(FakeClient(cached=32))
    lp.answer(lp.direct_text, "large_direct")
    rec = lp.answer(lp.transfer_text("red=13."), "escalate")[2]
    assert (rec["prefill_tokens"], rec["cached_tokens"], "n_images" in rec) == (34, 32, False)


def test_measured_transfers_reuse_only_the_direct_prefix_in_their_own_cache_namespace():
    client = FakeClient(cached=32)
    vlm, req, lp = _pipeline(client)
    req.__dict__["_measure"] = "routedvlm-sample"
    lp.answer(lp.direct_text, "large_direct")
    _, ans, (prefix, call) = lp.transfer(lp.transfer_text("red=13."))
    lp.transfer(lp.transfer_text("red=13. blue=2."))
    salts = [b.get("cache_salt") for b in client.bodies]
    # direct in the sample's namespace, the first two-stage call there too (it holds only the direct prompt), the
    # same prompt cold in a fresh namespace; the next K's namespace seeded with the direct prompt (1 token), its
    # two-stage call there, and its cold repeat
    assert salts[0] == salts[1] == "routedvlm-sample"
    assert salts[2].startswith("routedvlm-sample-") and salts[2] not in salts[:2]
    assert salts[3] == salts[4] == "routedvlm-sample-k2" and salts[5] not in salts[:5]
    assert client.bodies[3]["max_tokens"] == 1 and all(b["skip_special_tokens"] is False for b in client.bodies)
    assert ans == "26" and (prefix["stage"], prefix["prefill_tokens"], prefix["n_images"]) == ("large_prefix", 32, 1)
    assert call["stage"] == "large_transfer" and call["cached_tokens"] == 32 and "cold_ms" in prefix


def test_both_calls_of_an_escalation_carry_the_request_s_session_header(monkeypatch):
    """A load balancer hashing on x-session-id (vllm-router consistent_hash) sends the escalation where the direct
    call's prefix is cached: both calls of one request send the same key, another request another key."""
    client = FakeClient(cached=32)
    vlm, req, lp = _pipeline(client)
    req.__dict__["_session"] = "req-r1-0123"
    lp.answer(lp.direct_text, "large_direct")
    lp.answer(lp.transfer_text("red=13."), "escalate")
    assert client.headers == [{"x-session-id": "req-r1-0123"}] * 2
    other = FakeClient(cached=32)
    _, req2, lp2 = _pipeline(other)
    req2.__dict__["_session"] = "req-r2-4567"
    lp2.answer(lp2.direct_text, "large_direct")
    assert other.headers == [{"x-session-id": "req-r2-4567"}]
    monkeypatch.setenv("ROUTEDVLM_SESSION_HEADER", "x-user-session")
    lp.answer(lp.direct_text, "large_direct")
    assert client.headers[-1] == {"x-user-session": "req-r1-0123"}
    monkeypatch.setenv("ROUTEDVLM_SESSION_HEADER", "")
    lp.answer(lp.direct_text, "large_direct")
    assert client.headers[-1] == {}


def test_a_measured_sample_s_calls_share_its_namespace_as_the_session_key():
    from routedvlm.inference.sides.http.side import session_headers

    client = FakeClient(cached=32)
    vlm, req, lp = _pipeline(client)
    assert session_headers(req) == {}  # a request that is neither routed nor measured sends none
    req.__dict__["_measure"] = "routedvlm-sample"
    lp.answer(lp.direct_text, "large_direct")
    lp.transfer(lp.transfer_text("red=13."))
    assert {h["x-session-id"] for h in client.headers} == {"routedvlm-sample"}


def test_request_ids_name_their_replica_and_are_read_back():
    from routedvlm.inference.request_ids import replica_of, request_id

    a, b = request_id("serve-7f9c-x2"), request_id("serve-7f9c-x2")
    assert a != b and a.startswith("req-serve-7f9c-x2-") and replica_of(a) == "serve-7f9c-x2"
    assert replica_of(request_id()) is None and replica_of("req-unknown") is None
