"""routedvlm serve as vLLM's clients use it (issue #38): sampling of the visible answer only, budgets that cannot eat
the answer, n choices, stop / ignore_eos / logit_bias, and the chat shapes (developer role, tool calls, reasoning
fields); in process (FastAPI's TestClient) on the tiny pair."""
import pytest
from serve_helpers import user


@pytest.fixture(scope="module")
def pipe(tiny_pair, make_pipeline):
    return make_pipeline(*tiny_pair)


@pytest.fixture(scope="module")
def app_for(pipe):
    """A TestClient for a RoutedVLM with `router` on the tiny pair (kept per router for the module)."""
    from fastapi.testclient import TestClient

    from routedvlm.inference.routed import RoutedVLM
    from routedvlm.inference.serving.server import create_app

    clients, stack = {}, []

    def get(router):
        if router not in clients:
            client = TestClient(create_app(RoutedVLM(pipe, router)))
            clients[router] = client.__enter__()
            stack.append(client)
        return clients[router]

    yield get
    for client in stack:
        client.__exit__(None, None, None)


def chat(http, **body):
    r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    return r


def test_an_escalated_answer_under_max_tokens_16_is_not_empty(app_for, images):
    """Regression (#38): max_tokens also paid for the strategy's reasoning, so a `large_reason` answer under
    max_tokens 16 came back as content "" with finish_reason "length". The reasoning has its own budget now."""
    http = app_for("large_reason")
    body = chat(http, model="routedvlm", messages=user(images["square"], "Color?"), max_tokens=16).json()
    full = chat(http, model="routedvlm", messages=user(images["square"], "Color?")).json()
    assert body["choices"][0]["message"]["content"]
    usage = body["usage"]
    assert usage["completion_tokens_details"]["reasoning_tokens"] >= 24  # the tiny pair's min_reason_tokens
    assert usage["completion_tokens"] - usage["completion_tokens_details"]["reasoning_tokens"] <= 16
    assert full["choices"][0]["message"]["content"].startswith(body["choices"][0]["message"]["content"][:1])
    streamed = http.post("/v1/chat/completions", json={"model": "routedvlm", "messages": user(images["square"], "Color?"),
                                                        "max_tokens": 16, "stream": True})
    text = "".join(_deltas(streamed.text, "content"))
    assert text == body["choices"][0]["message"]["content"]


def test_routing_stages_stay_greedy_and_only_the_answer_call_samples(pipe, images, monkeypatch):
    """transfer_8: the small model's reasoning (what the router's K keeps) is decoded greedily; the large model's
    answer call samples. The greedy stage's output is the same with and without sampling."""
    from routedvlm.inference import sampling
    from routedvlm.inference.routed import RoutedVLM
    from routedvlm.inference.sampling import Sampling

    seen, original = [], sampling.current
    monkeypatch.setattr(sampling, "current", lambda: seen.append(original()) or seen[-1])
    routed = RoutedVLM(pipe, "transfer_8")
    greedy = routed.generate(image=images["square"], question="Color?")
    seen.clear()
    sampled = routed.generate(image=images["square"], question="Color?", sampling=Sampling(temperature=1.0, seed=5))
    assert seen[0] is None and seen[-1] is not None and seen[-1].seed == 5
    small = [r for r in sampled.trace if r["stage"] == "small_reason"]
    assert small == [r | {k: small[0][k] for k in ("vision_ms", "prefill_ms", "decode_ms")}
                     for r in greedy.trace if r["stage"] == "small_reason"]
    assert sampled.decision["sampled"] is True and greedy.decision["sampled"] is False


def test_seeded_samples_repeat_and_n_gives_n_choices(app_for, images):
    http = app_for("large_direct")
    body = {"model": "routedvlm", "messages": user(images["wide"], "Color?"), "temperature": 1.0, "max_tokens": 6}
    a = chat(http, **body, seed=11).json()
    b = chat(http, **body, seed=11).json()
    two = chat(http, **body, seed=11, n=2).json()
    greedy = chat(http, model="routedvlm", messages=user(images["wide"], "Color?"), max_tokens=6).json()
    assert a["choices"][0]["message"] == b["choices"][0]["message"]
    assert [c["index"] for c in two["choices"]] == [0, 1]
    assert two["choices"][0]["message"] == a["choices"][0]["message"]  # choice i samples with seed + i
    texts = {c["message"]["content"] for c in two["choices"]} | {greedy["choices"][0]["message"]["content"]}
    assert len(texts) >= 2  # 6 tokens over the tiny vocabulary: seeds 11, 12 and greedy cannot all agree
    c = chat(http, **body, seed=12).json()
    assert two["choices"][1]["message"] == c["choices"][0]["message"]
    assert two["usage"]["prompt_tokens"] == a["usage"]["prompt_tokens"]  # the prompt once, as vLLM counts it
    assert two["usage"]["completion_tokens"] == a["usage"]["completion_tokens"] + c["usage"]["completion_tokens"]


def test_stop_logit_bias_and_ignore_eos_on_a_plain_model(app_for, images, pipe):
    http = app_for("large_direct")
    base = {"model": "small", "messages": user(images["tall"], "Color?"), "max_tokens": 12,
            "chat_template_kwargs": {"enable_thinking": False}}
    greedy = chat(http, **base).json()["choices"][0]
    text = greedy["message"]["content"]
    assert len(text) >= 3
    cut = chat(http, **base, stop=[text[2:4]]).json()["choices"][0]
    assert text.startswith(cut["message"]["content"]) and len(cut["message"]["content"]) <= 2
    assert cut["finish_reason"] == "stop"
    eos = pipe.small.eos_ids()[0]
    ended = chat(http, **base, logit_bias={str(eos): 100}, min_tokens=0).json()
    assert ended["usage"]["completion_tokens"] == 1 and ended["choices"][0]["finish_reason"] == "stop"
    forced = chat(http, **base, logit_bias={str(eos): 100}, ignore_eos=True, min_tokens=0).json()
    assert forced["usage"]["completion_tokens"] == 12 and forced["choices"][0]["finish_reason"] == "length"


def test_developer_role_tool_calls_and_null_assistant_content(app_for, images):
    http = app_for("large_direct")
    q = user(images["square"], "Color?")
    as_system = chat(http, model="routedvlm", messages=[{"role": "system", "content": "Be brief."}, *q]).json()
    as_developer = chat(http, model="routedvlm", messages=[{"role": "developer", "content": "Be brief."}, *q]).json()
    assert as_developer["choices"][0]["message"]["content"] == as_system["choices"][0]["message"]["content"]
    history = [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": None}, *q]
    assert chat(http, model="routedvlm", messages=history).json()["choices"][0]["message"]["content"] is not None
    tools = [*q, {"role": "assistant", "content": None,
                  "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]
    r = http.post("/v1/chat/completions", json={"model": "routedvlm", "messages": tools})
    err = r.json()["error"]
    assert r.status_code == 400 and err["param"] == "messages[1].tool_calls" and "call no tools" in err["message"]


def test_a_plain_reply_cut_inside_its_reasoning_has_content_null_and_true_reasoning_tokens(app_for, images):
    http = app_for("large_direct")
    cut = chat(http, model="large", messages=user(images["square"], "Color?"), max_tokens=8).json()
    msg = cut["choices"][0]["message"]
    assert msg["content"] is None and msg["reasoning"] == msg["reasoning_content"] and msg["reasoning"]
    assert cut["usage"]["completion_tokens_details"]["reasoning_tokens"] == 8 == cut["usage"]["completion_tokens"]


def _events(text):
    import json

    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]


def _deltas(text, key):
    return [e["choices"][0]["delta"].get(key) for e in _events(text) if e["choices"] and e["choices"][0]["delta"].get(key)]


def test_plain_models_stream_token_by_token_with_continuous_usage(app_for, images):
    http = app_for("large_direct")
    body = {"model": "large", "messages": user(images["square"], "Color?"), "max_tokens": 30}
    whole = chat(http, **body).json()
    r = http.post("/v1/chat/completions", json={**body, "stream": True, "stream_options": {
        "include_usage": True, "continuous_usage_stats": True}})
    events = _events(r.text)
    reasoning = _deltas(r.text, "reasoning")
    assert len(reasoning) >= 5  # one delta per token or so, not one at the end
    assert "".join(reasoning) == whole["choices"][0]["message"]["reasoning"]
    assert "".join(_deltas(r.text, "content")) == (whole["choices"][0]["message"]["content"] or "")
    counts = [e["usage"]["completion_tokens"] for e in events]
    assert all(e["usage"] is not None for e in events) and counts == sorted(counts)
    assert events[-1]["usage"] == whole["usage"]


def test_streamed_routed_responses_carry_the_request_id_and_say_when_the_answer_was_decoded_first(app_for, images):
    cascade = app_for("mutual-verification")
    r = cascade.post("/v1/chat/completions", json={"model": "routedvlm", "messages": user(images["square"], "Color?"),
                                                    "stream": True})
    last = [e for e in _events(r.text) if e["choices"]][-1]
    assert r.headers["x-routedvlm-request-id"] == last["routedvlm"]["request_id"]
    decided_after = last["routedvlm"]["strategy"] in ("large_direct", "small_direct")
    assert r.headers["x-routedvlm-answer-decoded-before-route"] == ("1" if decided_after else "0")
    plain = app_for("large_reason").post("/v1/chat/completions", json={
        "model": "routedvlm", "messages": user(images["square"], "Color?"), "stream": True})
    assert plain.headers["x-routedvlm-answer-decoded-before-route"] == "0"


@pytest.mark.parametrize("body, param", [({"temperature": 3}, "temperature"), ({"top_p": 0}, "top_p"),
                                         ({"n": 2, "stream": True}, "n"), ({"logit_bias": {"x": 1}}, "logit_bias"),
                                         ({"stop": [1]}, "stop"), ({"use_beam_search": True}, "use_beam_search")])
def test_what_cannot_be_honoured_is_an_openai_shaped_400(app_for, images, body, param):
    http = app_for("large_direct")
    r = http.post("/v1/chat/completions", json={"model": "routedvlm", "messages": user(images["square"], "Q?"), **body})
    assert r.status_code == 400 and r.json()["error"]["param"] == param


def test_streams_carry_the_audit_header_and_sampled_answers_are_not_audited(pipe, images):
    """A streamed request draws its audit before the answer, so `x-routedvlm-audited` is in its headers as in a
    non-streamed response; a sampled answer is outside the (greedy) certificate and is not audited."""
    from fastapi.testclient import TestClient

    from routedvlm.inference.routed import RoutedVLM
    from routedvlm.inference.serving.server import create_app

    routed = RoutedVLM(pipe, "large_direct", audit_rate=1.0, audit={"alpha": 0.2, "seed": 0, "window": 0})
    body = {"model": "routedvlm", "messages": user(images["square"], "Color?"), "max_tokens": 4}
    with TestClient(create_app(routed)) as http:
        streamed = http.post("/v1/chat/completions", json={**body, "stream": True})
        sampled = chat(http, **body, temperature=1.0, seed=2)
        greedy = chat(http, **body)
        assert routed.auditor.wait(120)
    last = [e for e in _events(streamed.text) if e["choices"]][-1]
    assert streamed.headers["x-routedvlm-audited"] == "1" and last["routedvlm"]["audited"] is True
    assert streamed.headers["x-routedvlm-request-id"] == last["routedvlm"]["request_id"]
    assert sampled.headers["x-routedvlm-audited"] == "0" and greedy.headers["x-routedvlm-audited"] == "1"
