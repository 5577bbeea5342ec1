"""routedvlm serve: the official openai client against a server subprocess on loopback; routes, limits, API key,
20 concurrent requests; the OpenAI backend (remote small and large models) against the same server."""
import base64
import io
import json
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from routed_helpers import expected_route, save_prompt_router

KEY = "test-key"
PIPE_FLAGS = ["--min-new-tokens", "4", "--max-direct-tokens", "6", "--max-reason-tokens", "40", "--min-reason-tokens", "24"]
LIMIT_FLAGS = ["--max-images", "1", "--max-image-pixels", "20000", "--max-text-chars", "500"]
QUESTIONS = ["Color?", "Which bar is tallest?", "How many red boxes are in this picture?",
             "Count the boxes, then say how many are blue and how many are green.", "Is it red?"]


def data_url(image) -> str:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def user(image, text, n_images=1):
    parts = [{"type": "image_url", "image_url": {"url": data_url(image)}}] * n_images
    return [{"role": "user", "content": [*parts, {"type": "text", "text": text}]}]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tiny_pair, tmp_path_factory):
    """`routedvlm serve` in a subprocess on 127.0.0.1 with the session's tiny pair and a one-shot LightGBM router."""
    import httpx

    root = tmp_path_factory.mktemp("serve")
    folder = save_prompt_router(root / "router")
    port, log = _free_port(), open(root / "server.log", "w")
    cmd = [sys.executable, "-m", "routedvlm.training.cli", "serve", "--small", tiny_pair[0].name, "--large",
           tiny_pair[1].name, "--router", str(folder), "--port", str(port), "--api-key", KEY, "--log-level", "warning",
           *PIPE_FLAGS, *LIMIT_FLAGS]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                pytest.fail(f"server exited with {proc.returncode}:\n{(root / 'server.log').read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/health", headers={"Authorization": f"Bearer {KEY}"}, timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("server did not start within 180 s")
            time.sleep(0.25)
        yield {"url": url, "router": folder}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def client(server):
    from openai import OpenAI

    return OpenAI(base_url=f"{server['url']}/v1", api_key=KEY, timeout=120, max_retries=0)


@pytest.fixture(scope="module")
def local(tiny_pair, make_pipeline, server):
    """The same policy run in this process: what every served request must match."""
    from routedvlm.inference.routed import RoutedVLM

    return RoutedVLM(make_pipeline(*tiny_pair), str(server["router"]))


def _post(server, body, key=KEY, raw=None):
    import httpx

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(f"{server['url']}/v1/chat/completions", json=body if raw is None else None, content=raw,
                      headers=headers, timeout=120)


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
    assert resp.usage.completion_tokens == sum(r["decode_tokens"] for r in ref.trace if r["model"])


def test_models_and_health(client, server):
    import httpx

    assert [m.id for m in client.models.list()] == ["routedvlm", "small", "large"]
    health = httpx.get(f"{server['url']}/health", headers={"Authorization": f"Bearer {KEY}"}).json()
    assert health == {"status": "ok", "router_type": "lightgbm", "mode": "one-shot", "router_fallback": False, "router_error": None}


@pytest.mark.parametrize("key", [None, "wrong"])
def test_api_key_is_enforced(server, images, key):
    from openai import AuthenticationError, OpenAI

    r = _post(server, {"model": "routedvlm", "messages": user(images["square"], "Color?")}, key=key)
    assert r.status_code == 401
    assert r.json() == {"error": {"message": "Missing or wrong API key: send 'Authorization: Bearer <key>'.",
                                  "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}}
    with pytest.raises(AuthenticationError):
        OpenAI(base_url=f"{server['url']}/v1", api_key=key or "x", max_retries=0).models.list()


BAD = {
    "too_many_images": (lambda im: {"model": "routedvlm", "messages": user(im, "Color?", n_images=2)}, 400, "messages"),
    "image_too_large": (lambda im: {"model": "routedvlm", "messages": user(im.resize((200, 200)), "Color?")}, 400, "messages[0].content[0]"),
    "text_too_long": (lambda im: {"model": "routedvlm", "messages": user(im, "x" * 501)}, 400, "messages"),
    "model_not_found": (lambda im: {"model": "gpt-9", "messages": user(im, "Color?")}, 404, "model"),
    "invalid_content": (lambda im: {"model": "routedvlm", "messages": [{"role": "user", "content": [{"type": "audio"}]}]},
                        400, "messages[0].content[0]"),
    "missing_messages": (lambda im: {"model": "routedvlm"}, 400, "messages"),
    "unsupported_parameter": (lambda im: {"model": "routedvlm", "messages": user(im, "Color?"), "stream": True}, 400, "stream"),
    "invalid_image_url": (lambda im: {"model": "routedvlm", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://127.0.0.1:9/cat.png"}}, {"type": "text", "text": "Color?"}]}]},
        400, "messages[0].content[0]"),
    "invalid_image": (lambda im: {"model": "routedvlm", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8="}}, {"type": "text", "text": "Q?"}]}]},
        400, "messages[0].content[0]"),
    "invalid_input": (lambda im: {"model": "routedvlm", "messages": [{"role": "user", "content": "no image here"}]}, 400, "messages"),
}


@pytest.mark.parametrize("code", sorted(BAD))
def test_bad_requests_get_openai_shaped_4xx_errors(server, images, code):
    make, status, param = BAD[code]
    r = _post(server, make(images["square"]))
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["type"] == "invalid_request_error"
    assert (err["code"], err["param"]) == (code, param) and err["message"]


def test_body_that_is_not_json_is_a_400(server):
    r = _post(server, None, raw=b"{oops")
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"


@pytest.mark.slow
def test_twenty_concurrent_requests_each_get_their_own_route(server, local, images):
    """19 valid requests + 1 malformed one, 8 client threads: all answered; routes and answers match the policy
    run locally request by request; the malformed one gets a 400 and disturbs nothing."""
    jobs = [(images[name], QUESTIONS[i % len(QUESTIONS)]) for i, name in
            enumerate(["square", "wide", "tall", "square"] * 5)][:19]
    bodies = [{"model": "routedvlm", "messages": user(im, q)} for im, q in jobs]
    bodies.insert(7, {"model": "routedvlm", "messages": [{"role": "user", "content": 42}]})
    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = [pool.submit(_post, server, b) for b in bodies]
        responses = [f.result(timeout=300) for f in futures]
    bad = responses.pop(7)
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_content"
    for (im, q), r in zip(jobs, responses):
        assert r.status_code == 200, r.text
        ref = local(image=im, question=q)
        assert r.headers["x-routedvlm-strategy"] == ref.strategy == expected_route(q)
        assert r.json()["choices"][0]["message"]["content"] == ref.text
        assert r.headers["x-routedvlm-keep-tokens"] == ("8" if ref.strategy == "transfer_8" else "")
    assert len({r.headers["x-routedvlm-strategy"] for r in responses}) == 3


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
    from routedvlm.inference.server import create_app

    folder = save_prompt_router(tmp_path / "router")
    (folder / "policy.json").write_text('{"router_type": "lightgbm"')
    routed = RoutedVLM(make_pipeline(*tiny_pair), str(folder), fallback="large_direct")
    with TestClient(create_app(routed)) as http:
        health = http.get("/health").json()
        assert health["router_fallback"] is True and health["router_error"].startswith("RouterLoadError")
        r = http.post("/v1/chat/completions", json={"model": "routedvlm", "messages": user(images["wide"], "Color?")})
    assert r.status_code == 200 and r.headers["x-routedvlm-strategy"] == "large_direct"
    info = r.json()["routedvlm"]
    assert info["fallback"] is True and next(t for t in info["trace"] if t["stage"] == "decision")["error"] == routed.router_error


def test_serve_help_is_fast_and_bad_flags_are_errors():
    code = ("import json, sys; import routedvlm.inference.serve_cli as m; m.build_parser().format_help(); "
            "print(json.dumps(sorted(k for k in ('torch', 'transformers', 'fastapi') if k in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []
    bad = subprocess.run([sys.executable, "-m", "routedvlm.training.cli", "serve", "--small", "s", "--large", "l",
                          "--port", "0"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("error: The `--port` flag must be a positive integer <= 65535.")


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
    from routedvlm.router.errors import ModeUnavailableError

    url = f"{server['url']}/v1"
    pipe = make_pipeline(VLM.from_openai(url, "small", api_key=KEY), VLM.from_openai(url, "large", api_key=KEY),
                         selector="attention")
    with pytest.raises(ModeUnavailableError, match=r"^The attention selector needs the large model's attention weights"):
        pipe.run(images["square"], "Q?", "transfer_8")


def test_backend_errors_name_the_server_and_the_request(server, make_pipeline, images):
    from routedvlm.inference import VLM
    from routedvlm.router.errors import BackendError

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

    from routedvlm.inference.backends.openai_http import ChatClient
    from routedvlm.router.errors import BackendError

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

    from routedvlm.inference.backends.openai_replies import entropy as _entropy

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
    from fastapi.testclient import TestClient

    from routedvlm.inference.routed import RoutedVLM
    from routedvlm.inference.server import create_app
    from routedvlm.router.errors import ConfigError

    monkeypatch.setenv("ROUTEDVLM_BACKEND_API_KEY", KEY)
    url = f"{server['url']}/v1"
    routed = RoutedVLM.from_pretrained(f"{url}#small", f"{url}#large", "large_direct", min_new_tokens=4, max_direct_tokens=6)
    assert routed.pipeline.large.remote and routed.pipeline.large.name == f"{url}#large"
    with TestClient(create_app(routed)) as http:
        ok = http.post("/v1/chat/completions", json={"model": "routedvlm", "messages": user(images["square"], "Color?")})
        plain = http.post("/v1/chat/completions", json={"model": "small", "messages": user(images["square"], "Color?")})
    assert ok.status_code == 200 and ok.headers["x-routedvlm-strategy"] == "large_direct"
    assert all(r["remote"] for r in ok.json()["routedvlm"]["trace"] if r["model"])
    assert plain.status_code == 400 and plain.json()["error"]["code"] == "model_is_remote"
    with pytest.raises(ConfigError, match=r"^A remote model must be given as '<base_url>#<model id>'"):
        RoutedVLM.from_pretrained(url, f"{url}#large", "large_direct")


def test_run_many_over_http_gives_the_answers_of_single_runs(remote_pipe, images):
    """The labeller's shared run works with remote models too (the server caches prefixes; prompts go one by one)."""
    ids = ["small_direct", "large_direct", "transfer_8", "transfer_all"]
    many = remote_pipe.run_many(images["tall"], "How many boxes?", ids)
    assert {s: r.answer for s, r in many.items()} == {s: remote_pipe.run(images["tall"], "How many boxes?", s).answer for s in ids}


def test_reasoning_tokens_from_logprob_tokens_worked_example():
    from routedvlm.inference.backends.openai_replies import reasoning_tokens as _reasoning_tokens

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

    from routedvlm.data.labels import read_labels
    from routedvlm.training.cli import main

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

    from routedvlm.data.labels import read_labels
    from routedvlm.training.cli import main

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
