"""routedvlm serve: the official openai client against a server subprocess on loopback (non-streaming); routes,
honest usage, probes without the key, limits and OpenAI-shaped errors; the OpenAI backend (remote small and
large models) against the same server. Streaming, metrics and health: test_server_stream.py; load: test_server_load.py."""
import json
import subprocess
import sys

import pytest
from routed_helpers import expected_route, save_prompt_router
from serve_helpers import KEY, QUESTIONS, bomb_png, data_url, free_port, image_part, post, user

_free_port = free_port


@pytest.fixture(scope="module")
def server(served):
    return served


@pytest.fixture(scope="module")
def client(server):
    from openai import OpenAI

    return OpenAI(base_url=f"{server['url']}/v1", api_key=KEY, timeout=120, max_retries=0)


@pytest.fixture(scope="module")
def local(served_local):
    return served_local


def _post(server, body, key=KEY, raw=None):
    return post(server["url"], body, key=key, raw=raw)


def test_openai_client_gets_the_route_in_headers_and_body(client, local, images):
    q = QUESTIONS[2]
    raw = client.chat.completions.with_raw_response.create(model="routedvlm", messages=user(images["square"], q))
    resp = raw.parse()
    ref = local(image=images["square"], question=q)
    assert raw.headers["x-routedvlm-strategy"] == resp.model_extra["routedvlm"]["strategy"] == expected_route(q) == ref.strategy
    assert raw.headers["x-routedvlm-keep-tokens"] == ""
    assert resp.choices[0].message.content == ref.text and resp.object == "chat.completion"
    info = resp.model_extra["routedvlm"]
    assert info["p_correct"] == pytest.approx(ref.p_correct) and info["fallback"] is False
    assert [r["stage"] for r in info["trace"]] == [r["stage"] for r in ref.trace]
    assert resp.usage.model_dump(exclude_none=True) == ref.usage


@pytest.mark.parametrize("q", QUESTIONS[:4])
def test_usage_counts_the_final_answer_call_once(client, local, images, q):
    """prompt_tokens = the prompt the answer was decoded from (its reused prefix counted once, as cached_tokens);
    completion_tokens = that answer's tokens; not the sum over every stage."""
    resp = client.chat.completions.create(model="routedvlm", messages=user(images["wide"], q))
    trace = resp.model_extra["routedvlm"]["trace"]
    last = trace[-1]
    assert resp.usage.prompt_tokens == last["prefill_tokens"] + last["cached_tokens"]
    assert resp.usage.prompt_tokens_details.cached_tokens == last["cached_tokens"]
    assert resp.usage.completion_tokens == last["decode_tokens"] == local(image=images["wide"], question=q).usage["completion_tokens"]
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens


@pytest.mark.parametrize("q", QUESTIONS[:3])
def test_max_tokens_caps_the_routed_answer(client, local, images, q):
    resp = client.chat.completions.create(model="routedvlm", messages=user(images["square"], q), max_tokens=1)
    ref = local(image=images["square"], question=q, max_tokens=1)
    assert resp.usage.completion_tokens == 1 and resp.choices[0].finish_reason == "length"
    assert resp.choices[0].message.content == ref.text and ref.finish_reason == "length"


def test_text_only_chats_are_routed(client, local):
    """No image: routed like any other chat; the image features say there is no image."""
    for q in QUESTIONS[:3]:
        raw = client.chat.completions.with_raw_response.create(model="routedvlm", messages=[{"role": "user", "content": q}])
        resp, ref = raw.parse(), local(question=q)
        assert raw.headers["x-routedvlm-strategy"] == ref.strategy == expected_route(q)
        assert resp.choices[0].message.content == ref.text
        decision = next(r for r in resp.model_extra["routedvlm"]["trace"] if r["stage"] == "decision")
        assert decision["features"]["feat__prompt__question_chars"] == len(q)


def test_multi_turn_chats_keep_working(client, local, images):
    from openai import BadRequestError

    turns = [{"role": "system", "content": "Answer briefly."}, *user(images["tall"], "Color?"),
             {"role": "assistant", "content": "Blue."}, {"role": "user", "content": "How many boxes?"}]
    with pytest.raises(BadRequestError, match="Only the last user message may hold an image"):
        client.chat.completions.create(model="routedvlm", messages=turns)
    turns[1], turns[3] = {"role": "user", "content": "Color?"}, user(images["tall"], "How many boxes?")[0]
    resp = client.chat.completions.create(model="routedvlm", messages=turns)
    ref = local.generate(messages=[{"role": m["role"], "content": m["content"]} for m in turns])
    assert resp.choices[0].message.content == ref.text


def test_models_need_the_key_but_probes_do_not(client, server):
    import httpx

    assert [m.id for m in client.models.list()] == ["routedvlm", "small", "large"]
    assert httpx.get(f"{server['url']}/v1/models").status_code == 401
    health = httpx.get(f"{server['url']}/health")
    assert health.status_code == 200
    assert {k: health.json()[k] for k in ("status", "ready", "router_type", "mode", "router_fallback", "router_healthy",
                                          "router_error")} == {
        "status": "ok", "ready": True, "router_type": "lightgbm", "mode": "one-shot", "router_fallback": False,
        "router_healthy": True, "router_error": None}
    assert httpx.get(f"{server['url']}/ready").json() == {"ready": True}
    assert httpx.get(f"{server['url']}/metrics").status_code == 200


@pytest.mark.parametrize("key", [None, "wrong"])
def test_api_key_is_enforced(server, images, key):
    from openai import AuthenticationError, OpenAI

    r = _post(server, {"model": "routedvlm", "messages": user(images["square"], "Color?")}, key=key)
    assert r.status_code == 401
    assert r.json() == {"error": {"message": "Missing or wrong API key: send 'Authorization: Bearer <key>'.",
                                  "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}}
    with pytest.raises(AuthenticationError):
        OpenAI(base_url=f"{server['url']}/v1", api_key=key or "x", max_retries=0).models.list()


def _tiff_url(im):
    return data_url(im, "TIFF", "image/tiff")


BAD = {
    "too_many_images": (lambda im: {"model": "routedvlm", "messages": user(im, "Color?", n_images=2)}, 400, "messages"),
    "image_too_large": (lambda im: {"model": "routedvlm", "messages": user(im.resize((200, 200)), "Color?")}, 400, "messages[0].content[0]"),
    "text_too_long": (lambda im: {"model": "routedvlm", "messages": user(im, "x" * 501)}, 400, "messages"),
    "model_not_found": (lambda im: {"model": "gpt-9", "messages": user(im, "Color?")}, 404, "model"),
    "invalid_content": (lambda im: {"model": "routedvlm", "messages": [{"role": "user", "content": [{"type": "audio"}]}]},
                        400, "messages[0].content[0]"),
    "missing_messages": (lambda im: {"model": "routedvlm"}, 400, "messages"),
    "unsupported_parameter": (lambda im: {"model": "routedvlm", "messages": user(im, "Color?"), "use_beam_search": True}, 400, "use_beam_search"),
    "invalid_value": (lambda im: {"model": "routedvlm", "messages": user(im, "Color?"), "temperature": 2.5}, 400, "temperature"),
    "invalid_image_url": (lambda im: {"model": "routedvlm", "messages": [image_part("http://127.0.0.1:9/cat.png")]},
                          400, "messages[0].content[0]"),
    "invalid_image": (lambda im: {"model": "routedvlm", "messages": [image_part("data:image/png;base64,aGVsbG8=")]},
                      400, "messages[0].content[0]"),
    "unsupported_media_type": (lambda im: {"model": "routedvlm", "messages": [image_part(_tiff_url(im))]},
                               400, "messages[0].content[0]"),
    "invalid_input": (lambda im: {"model": "routedvlm", "messages": [{"role": "assistant", "content": "hi"}]}, 400, "messages"),
    "context_length_exceeded": (lambda im: {"model": "small", "messages": user(im, "Color?"), "max_tokens": 4096}, 400, "max_tokens"),
}


@pytest.mark.parametrize("code", sorted(BAD))
def test_bad_requests_get_openai_shaped_4xx_errors(server, images, code):
    make, status, param = BAD[code]
    r = _post(server, make(images["square"]))
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["type"] == "invalid_request_error"
    assert (err["code"], err["param"]) == (code, param) and err["message"]


@pytest.mark.parametrize("param, value", [("use_beam_search", True), ("tools", [{"type": "function", "function": {"name": "f"}}]),
                                          ("response_format", {"type": "json_object"}), ("best_of", 3)])
def test_what_cannot_be_honoured_is_refused_not_ignored(client, images, param, value):
    from openai import BadRequestError

    with pytest.raises(BadRequestError, match=rf"`{param}` = .* is not supported by routedvlm serve") as info:
        extra = {param: value} if param in ("tools", "response_format") else {"extra_body": {param: value}}
        client.chat.completions.create(model="routedvlm", messages=user(images["square"], "Color?"), **extra)
    assert info.value.body["param"] == param


def test_greedy_values_of_sampling_parameters_are_accepted(client, local, images):
    resp = client.chat.completions.create(model="routedvlm", messages=user(images["square"], "Color?"), temperature=0,
                                          top_p=1, n=1, seed=7, presence_penalty=0, stop=[])
    assert resp.choices[0].message.content == local(image=images["square"], question="Color?").text


@pytest.mark.parametrize("extra", [{"logprobs": True}, {"extra_body": {"chat_template_kwargs": {"enable_thinking": True}}},
                                   {"extra_body": {"min_tokens": 3}}])
def test_plain_model_parameters_are_refused_by_the_routed_model(client, images, extra):
    from openai import BadRequestError

    with pytest.raises(BadRequestError, match=r"is (supported by the plain models|not taken by the routed model)"):
        client.chat.completions.create(model="routedvlm", messages=user(images["square"], "Color?"), **extra)


def test_decompression_bomb_is_a_400_not_a_500(server):
    url = "data:image/png;base64," + __import__("base64").b64encode(bomb_png()).decode()
    r = _post(server, {"model": "routedvlm", "messages": [image_part(url)]})
    assert r.status_code == 400 and r.json()["error"]["code"] == "image_too_large", r.text


def test_body_over_the_limit_is_a_413_before_it_is_read(server):
    r = _post(server, None, raw=b'{"model": "routedvlm", "messages": "' + b"x" * 1_100_000 + b'"}')
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    chunked = _post(server, None, raw=iter([b'{"model": "routedvlm", "pad": "', b"x" * 600_000, b"x" * 600_000, b'"}']))
    assert chunked.status_code == 413 and chunked.json()["error"]["code"] == "request_too_large"


def test_body_that_is_not_json_is_a_400(server):
    r = _post(server, None, raw=b"{oops")
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"


def test_plain_models_honour_thinking_max_tokens_and_logprobs(client, local, images):
    msgs = user(images["square"], "How many boxes?")
    thought = client.chat.completions.create(model="small", messages=msgs, max_tokens=10, logprobs=True, top_logprobs=3,
                                             extra_body={"chat_template_kwargs": {"enable_thinking": True}, "min_tokens": 10})
    choice = thought.choices[0]
    assert choice.finish_reason == "length" and choice.message.content is None
    assert isinstance(choice.message.model_extra["reasoning_content"], str)
    assert len(choice.logprobs.content) == thought.usage.completion_tokens == 10
    assert len(choice.logprobs.content[0].top_logprobs) == 3
    direct = client.chat.completions.create(model="small", messages=msgs, max_tokens=6,
                                            extra_body={"chat_template_kwargs": {"enable_thinking": False}, "min_tokens": 4})
    ref = local.pipeline.run(images["square"], "How many boxes?", "small_direct")
    assert direct.choices[0].message.content == ref.answer
    assert "reasoning_content" not in (direct.choices[0].message.model_extra or {})


def test_corrupt_router_folder_falls_back_in_process(tiny_pair, make_pipeline, images, tmp_path):
    from fastapi.testclient import TestClient

    from routedvlm.inference.routed import RoutedVLM
    from routedvlm.inference.serving.server import create_app

    folder = save_prompt_router(tmp_path / "router")
    (folder / "policy.json").write_text('{"router_type": "lightgbm"')
    routed = RoutedVLM(make_pipeline(*tiny_pair), str(folder), fallback="large_direct")
    with TestClient(create_app(routed)) as http:
        health = http.get("/health").json()
        assert health["router_fallback"] is True and health["router_error"].startswith("RouterLoadError")
        assert health["status"] == "degraded" and health["router_healthy"] is False
        r = http.post("/v1/chat/completions", json={"model": "routedvlm", "messages": user(images["wide"], "Color?")})
    assert r.status_code == 200 and r.headers["x-routedvlm-strategy"] == "large_direct"
    info = r.json()["routedvlm"]
    assert info["fallback"] is True and next(t for t in info["trace"] if t["stage"] == "decision")["error"] == routed.router_error


def test_serve_help_is_fast_and_bad_flags_are_errors():
    code = ("import json, sys; import routedvlm.inference.serving.cli as m; m.build_parser().format_help(); "
            "print(json.dumps(sorted(k for k in ('torch', 'transformers', 'fastapi') if k in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []
    from routedvlm.inference.serving.cli import build_parser

    text = " ".join(build_parser().format_help().split())
    assert "TCP port (default: 8000)" in text and "(default: 127.0.0.1)" in text
    bad = subprocess.run([sys.executable, "-m", "routedvlm.cli", "serve", "--small", "s", "--large", "l",
                          "--port", "0"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("error: The `--port` flag must be a positive integer <= 65535.")
    threads = subprocess.run([sys.executable, "-m", "routedvlm.cli", "serve", "--small", "s", "--large", "l",
                              "--threads", "-1"], capture_output=True, text=True)
    assert threads.returncode == 2 and threads.stderr.startswith("error: The `--threads` flag must be an integer >= 0.")


# ---- the OpenAI backend: a pipeline whose two models are remote (the same server, models "small" and "large") ----
REMOTE_STRATEGIES = ["small_direct", "large_direct", "small_reason", "large_reason", "transfer_8", "transfer_all"]


@pytest.fixture(scope="module")
def remote_pipe(server, make_pipeline):
    from routedvlm.inference import VLM

    url = f"{server['url']}/v1"  # routedvlm serve keeps no prefix cache across requests: no reuse to require
    return make_pipeline(VLM.from_openai(url, "small", api_key=KEY, timeout=120, require_prefix_cache=False),
                         VLM.from_openai(url, "large", api_key=KEY, timeout=120, require_prefix_cache=False))


@pytest.mark.parametrize("strategy", ["small_direct", "large_direct"])
def test_remote_direct_answers_and_logprobs_equal_the_local_models(remote_pipe, local, images, strategy):
    remote = remote_pipe.run(images["wide"], "How many boxes?", strategy)
    ref = local.pipeline.run(images["wide"], "How many boxes?", strategy)
    assert remote.answer == ref.answer and remote.generation.output_tokens == ref.generation.output_tokens
    assert remote.token_logprobs == pytest.approx(ref.token_logprobs, abs=1e-4)
    last = remote.trace[-1]
    # the server prefills the whole prompt (no prefix cache): the local prefill plus the local cached prefix
    assert last["remote"] is True and last["prefill_tokens"] == ref.trace[-1]["prefill_tokens"] + ref.trace[-1]["cached_tokens"]


@pytest.mark.parametrize("strategy", REMOTE_STRATEGIES)
def test_every_strategy_runs_over_the_openai_backend(remote_pipe, images, strategy):
    res = remote_pipe.run(images["square"], "How many boxes?", strategy)
    assert res.strategy == strategy and isinstance(res.answer, str)
    assert all(r["remote"] for r in res.trace) and res.latency_ms > 0
    if strategy == "transfer_8":
        assert 0 < res.keep_tokens <= 8 and res.trace[0]["decode_tokens"] <= 8
    json.dumps(res.to_dict())


def test_escalation_over_http_equals_the_one_stage_transfer(remote_pipe, images):
    first = remote_pipe.run(images["tall"], "How many boxes?", "large_direct")
    second = remote_pipe.escalate(first, 8)
    assert second.answer == remote_pipe.run(images["tall"], "How many boxes?", "transfer_8").answer
    assert [r["stage"] for r in second.trace] == ["large_prefix", "large_direct", "small_reason", "escalate"]


def test_routed_vlm_with_remote_models_takes_the_local_route(remote_pipe, local, images):
    from routedvlm.inference import RoutedVLM

    remote = RoutedVLM(remote_pipe, "mutual-verification:8")(image=images["square"], question="Is it red?")
    ref = RoutedVLM(local.pipeline, "mutual-verification:8")(image=images["square"], question="Is it red?")
    assert remote.strategy == ref.strategy and remote.decision["features"] == ref.decision["features"]


def test_attention_selector_is_unavailable_over_http(server, make_pipeline, images):
    from routedvlm.inference import VLM
    from routedvlm.errors import ModeUnavailableError

    url = f"{server['url']}/v1"
    pipe = make_pipeline(VLM.from_openai(url, "small", api_key=KEY), VLM.from_openai(url, "large", api_key=KEY),
                         selector="attention")
    with pytest.raises(ModeUnavailableError, match=r"^The attention selector needs the large model's attention weights"):
        pipe.run(images["square"], "Q?", "transfer_8")


def test_backend_errors_name_the_server_and_the_request(server, make_pipeline, images):
    from routedvlm.inference import VLM
    from routedvlm.errors import BackendError

    closed = f"http://127.0.0.1:{_free_port()}/v1"
    pipe = make_pipeline(VLM.from_openai(closed, "small", max_retries=1, timeout=5), VLM.from_openai(closed, "large"))
    with pytest.raises(BackendError, match=rf"^The OpenAI-compatible server {closed} failed the small_direct \(small\) "
                                           r"request \(x-request-id routedvlm-[0-9a-f]{12}\) after 2 attempt\(s\): ConnectError"):
        pipe.run(images["square"], "Q?", "small_direct")
    unknown = make_pipeline(VLM.from_openai(f"{server['url']}/v1", "medium", api_key=KEY), VLM.from_openai(closed, "large"))
    with pytest.raises(BackendError, match=r"after 1 attempt\(s\): HTTP 404: The model 'medium' does not exist on this server"):
        unknown.run(images["square"], "Q?", "small_direct")


def test_client_retries_5xx_with_backoff_but_not_4xx():
    import httpx

    from routedvlm.inference.sides.http.openai_http import ChatClient
    from routedvlm.errors import BackendError

    calls = []

    def handler(request):
        calls.append(request.headers["x-request-id"])
        if len(calls) == 1:
            return httpx.Response(503, json={"error": {"message": "busy"}})
        if len(calls) == 2:
            return httpx.Response(200, json={"ok": True})
        return httpx.Response(400, json={"error": {"message": "bad field"}})

    client = ChatClient("http://127.0.0.1:1/v1", max_retries=3, backoff_s=0.001)
    client._http = httpx.Client(transport=httpx.MockTransport(handler))
    assert client.create({}) == {"ok": True} and len(calls) == 2 and calls[0] == calls[1]
    with pytest.raises(BackendError, match=r"after 1 attempt\(s\): HTTP 400: bad field"):
        client.create({})
    assert len(calls) == 3


def test_first_token_entropy_from_top_logprobs_worked_example():
    """p = 0.5, 0.25 listed; the remaining 0.25 is one more outcome: H = -(.5 ln .5 + 2 * .25 ln .25) = 1.0397 nats."""
    import math

    from routedvlm.inference.sides.http.openai_replies import entropy as _entropy

    assert _entropy([{"logprob": math.log(0.5)}, {"logprob": math.log(0.25)}]) == pytest.approx(1.0397, abs=1e-4)


def test_thinking_only_remote_model_answers_directly_through_continue_final_message(server, make_pipeline, local, images):
    """thinking="always": a direct answer prefills an empty think block (continue_final_message), which on this
    hybrid-template server renders exactly the local direct prompt, so the answers match."""
    from routedvlm.inference import VLM

    url = f"{server['url']}/v1"
    pipe = make_pipeline(VLM.from_openai(url, "small", api_key=KEY, thinking="always"), VLM.from_openai(url, "large", api_key=KEY))
    assert pipe.run(images["square"], "How many boxes?", "small_direct").answer == \
        local.pipeline.run(images["square"], "How many boxes?", "small_direct").answer


def test_reasoning_cut_at_its_limit_is_finished_over_http(remote_pipe, images):
    res = remote_pipe.run(images["wide"], "How many boxes?", "small_reason")
    stages = [r["stage"] for r in res.trace]
    assert res.reasoning_generation.output_tokens == remote_pipe.config.max_reason_tokens  # the tiny model never closes
    assert stages == ["small_reason", "small_reason_answer"] and res.generation is not res.reasoning_generation
    assert isinstance(res.answer, str) and res.reasoning


def test_serve_in_front_of_openai_compatible_servers(server, images, monkeypatch):
    """RoutedVLM.from_pretrained takes '<base_url>#<model>' sides: an app whose models are the served ones."""
    import httpx
    from fastapi.testclient import TestClient

    from routedvlm.inference.routed import RoutedVLM
    from routedvlm.inference.serving.server import create_app
    from routedvlm.errors import ConfigError

    monkeypatch.setenv("ROUTEDVLM_BACKEND_API_KEY", KEY)
    url = f"{server['url']}/v1"
    routed = RoutedVLM.from_pretrained(f"{url}#small", f"{url}#large", "large_direct", min_new_tokens=4, max_direct_tokens=6)
    assert not routed.pipeline.large.stateful and routed.pipeline.large.name == f"{url}#large"
    chat = {"model": "small", "messages": user(images["square"], "Color?"), "max_tokens": 6, "min_tokens": 4}
    text = {"model": "large", "prompt": "Color of the box:", "max_tokens": 5, "min_tokens": 5}
    think = {**chat, "max_tokens": 30, "chat_template_kwargs": {"enable_thinking": True}}
    with TestClient(create_app(routed)) as http:
        ok = http.post("/v1/chat/completions", json={"model": "routedvlm", "messages": user(images["square"], "Color?")})
        plain = [http.post(route, json=body) for route, body in (("/v1/chat/completions", chat), ("/v1/completions", text),
                                                                 ("/v1/chat/completions", think))]
        streamed = http.post("/v1/completions", json={**text, "stream": True})
    assert ok.status_code == 200 and ok.headers["x-routedvlm-strategy"] == "large_direct"
    assert all(r["remote"] for r in ok.json()["routedvlm"]["trace"] if r["model"])
    # the plain models pass through: one call of the backend, the same answer and token counts as asking it directly
    direct = [_post(server, chat).json(), httpx.post(f"{server['url']}/v1/completions", json=text, timeout=120,
                                                      headers={"Authorization": f"Bearer {KEY}"}).json(),
              _post(server, think).json()]
    assert [r.status_code for r in plain] == [200, 200, 200]
    (chat_out, text_out, think_out), (chat_ref, text_ref, think_ref) = [r.json() for r in plain], direct
    assert chat_out["choices"][0]["message"]["content"] == chat_ref["choices"][0]["message"]["content"]
    assert text_out["choices"][0]["text"] == text_ref["choices"][0]["text"] and text_out["object"] == "text_completion"
    assert think_out["choices"][0]["message"]["reasoning"] == think_ref["choices"][0]["message"]["reasoning"]
    for out, ref in zip((chat_out, text_out, think_out), direct):
        assert out["usage"]["completion_tokens"] == ref["usage"]["completion_tokens"]
        assert out["usage"]["prompt_tokens"] == ref["usage"]["prompt_tokens"]
        assert out["choices"][0]["finish_reason"] == ref["choices"][0]["finish_reason"]
    events = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")]
    assert streamed.status_code == 200 and "".join(e["choices"][0]["text"] for e in events if e["choices"]) == \
        text_ref["choices"][0]["text"]
    with pytest.raises(ConfigError, match=r"^A remote model must be given as '<base_url>#<model id>'"):
        RoutedVLM.from_pretrained(url, f"{url}#large", "large_direct")


def test_run_many_over_http_gives_the_answers_of_single_runs(remote_pipe, images):
    """The labeller's shared run works with remote models too (the server caches prefixes; prompts go one by one)."""
    ids = ["small_direct", "large_direct", "transfer_8", "transfer_all"]
    many = remote_pipe.run_many(images["tall"], "How many boxes?", ids)
    assert {s: r.answer for s, r in many.items()} == {s: remote_pipe.run(images["tall"], "How many boxes?", s).answer for s in ids}


def test_reasoning_tokens_from_logprob_tokens_worked_example():
    from routedvlm.inference.sides.http.openai_replies import reasoning_tokens as _reasoning_tokens

    toks = ["<think>", "a", "b", "</think>", "c", "<|im_end|>"]
    assert _reasoning_tokens(toks, "ab", thinking=True, stopped=True, has_logprobs=True) == ["a", "b"]
    assert _reasoning_tokens(["a", "b", "<|im_end|>"], "ab", thinking=True, stopped=True, has_logprobs=True) == ["a", "b"]
    assert _reasoning_tokens(["a", "b", "c"], "abc", thinking=True, stopped=False, has_logprobs=True) == ["a", "b", "c"]
    assert _reasoning_tokens(["x", "y", "Answer:", " 3"], "xy", thinking=False, stopped=True, has_logprobs=True) == ["x", "y"]
    assert _reasoning_tokens([], "two words", thinking=True, stopped=True, has_logprobs=False) == ["two", " words"]


def test_remote_only_routed_vlm_needs_no_lock(remote_pipe, local):
    from routedvlm.inference import RoutedVLM

    assert not hasattr(RoutedVLM(remote_pipe, "large_direct").lock, "acquire")
    assert hasattr(local.lock, "acquire")


def test_run_many_over_http_equals_run(remote_pipe, images):
    """Remote sides run their own stages in run_many (the server caches prefixes); only the reasoning is shared."""
    ids = ["small_direct", "large_direct", "small_reason", "large_reason", "transfer_8", "transfer_all"]
    many = remote_pipe.run_many(images["square"], "How many boxes?", ids)
    for sid in ids:
        assert many[sid].answer == remote_pipe.run(images["square"], "How many boxes?", sid).answer, sid
    assert all(r["remote"] for res in many.values() for r in res.trace)
    t8 = many["transfer_8"].trace
    assert [r["stage"] for r in t8] == ["small_reason", "large_prefix", "large_transfer"] and t8[0]["shared"]


def test_label_with_remote_sides_writes_labels_and_names_the_servers(server, images, tmp_path, monkeypatch):
    """`routedvlm label --small <url>#small --large <url>#large`: remote sides as RoutedVLM/serve take them (this
    stand-in keeps no prefix cache across requests, so the reuse check is off); metadata names servers and models."""
    import pandas as pd

    from routedvlm.data.labels.schema import read_labels
    from routedvlm.cli import main

    monkeypatch.setenv("ROUTEDVLM_BACKEND_API_KEY", KEY)
    monkeypatch.setenv("ROUTEDVLM_REQUIRE_PREFIX_CACHE", "0")
    for name, img in images.items():
        img.save(tmp_path / f"{name}.png")
    pd.DataFrame([{"id": n, "question": "How many boxes?", "answer": "2", "image": f"{n}.png"} for n in images]
                 ).to_json(tmp_path / "data.jsonl", orient="records", lines=True)
    url, out = f"{server['url']}/v1", tmp_path / "labels.parquet"
    argv = ["label", "--small", f"{url}#small", "--large", f"{url}#large", "--dataset", str(tmp_path / "data.jsonl"),
            "--out", str(out), "--k-grid", "4", "--max-new-tokens", "6", "--min-new-tokens", "4",
            "--max-reason-tokens", "40", "--min-reason-tokens", "24", "--no-progress"]
    assert main(argv) == 0
    df, meta = read_labels(out)
    assert df["error"].isna().all() and len(df) == 3
    assert (meta["models"]["large"]["server"], meta["models"]["large"]["model_id"]) == (url, "large")
    assert meta["models"]["small"]["dtype"] is None and meta["remote_sides"] == ["small", "large"]
    assert (df["latency_ms__escalate_4"] <= df["latency_ms__transfer_4"] + 1e-9).all()
    assert main(["label", "--small", url, "--large", f"{url}#large", "--dataset", "x", "--out", str(tmp_path / "y")]) == 2


def test_label_at_concurrency_over_http_gives_the_serial_labels(server, images, tmp_path, monkeypatch):
    """`routedvlm label --concurrency 4` with both sides remote: several samples in flight on the server, the same
    answers, correctness, tokens and features as one at a time; the metadata says the latencies are batched."""
    import pandas as pd

    from routedvlm.data.labels.schema import read_labels
    from routedvlm.cli import main

    monkeypatch.setenv("ROUTEDVLM_BACKEND_API_KEY", KEY)
    monkeypatch.setenv("ROUTEDVLM_REQUIRE_PREFIX_CACHE", "0")
    rows = []
    for i, (name, img) in enumerate(sorted(images.items()) * 2):
        img.save(tmp_path / f"{name}.png")
        rows.append({"id": f"{name}-{i}", "question": QUESTIONS[i % len(QUESTIONS)], "answer": "2", "image": f"{name}.png"})
    pd.DataFrame(rows).to_json(tmp_path / "data.jsonl", orient="records", lines=True)
    url, runs = f"{server['url']}/v1", {}
    for n in (1, 4):
        out = tmp_path / f"c{n}.parquet"
        assert main(["label", "--small", f"{url}#small", "--large", f"{url}#large", "--dataset",
                     str(tmp_path / "data.jsonl"), "--out", str(out), "--k-grid", "4", "--max-new-tokens", "6",
                     "--min-new-tokens", "4", "--max-reason-tokens", "40", "--min-reason-tokens", "24", "--no-progress",
                     "--concurrency", str(n), "--flush-every", "2"]) == 0
        runs[n] = read_labels(out)
    (one, meta1), (four, meta4) = runs[1], runs[4]
    assert four["error"].isna().all() and len(four) == len(rows)
    cols = [c for c in one.columns if c.startswith(("answer__", "correct__", "output_tokens__", "feat__"))]
    pd.testing.assert_frame_equal(one.set_index("sample_id").sort_index()[cols],
                                  four.set_index("sample_id").sort_index()[cols], check_exact=False, rtol=1e-6)
    assert (meta1["latency_source"], meta1["requests_in_flight"]) == ("wall-clock", 1)
    assert (meta4["latency_source"], meta4["requests_in_flight"], meta4["runner"]) == ("batched-wall-clock", 4, "threads")
