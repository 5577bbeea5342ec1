"""routedvlm serve against a careless or hostile client, in process (FastAPI TestClient): every client mistake is a
4xx in the OpenAI error shape (deep JSON, lone surrogates, elongated images, too many messages or parts, prompts
past the context), special-token text stays text, the Bearer scheme in any case, one Authorization header,
/health 503 until the server can answer, the OpenAPI document, and per-request deadlines stopping generate."""
import json

import pytest
from serve_helpers import KEY, data_url, user

AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def routed(tiny_pair, make_pipeline):
    from routedvlm.inference.routed import RoutedVLM

    return RoutedVLM(make_pipeline(*tiny_pair), "large_direct")


@pytest.fixture(scope="module")
def http(routed):
    from fastapi.testclient import TestClient

    from routedvlm.inference.serving.protocol import Limits
    from routedvlm.inference.serving.server import create_app

    limits = Limits(max_text_chars=200_000, max_body_bytes=8 * 2**20)
    with TestClient(create_app(routed, api_key=KEY, limits=limits)) as client:
        yield client


def _chat(http, body=None, raw=None, headers=AUTH):
    return http.post("/v1/chat/completions", json=body, content=raw, headers={"content-type": "application/json",
                                                                              **headers})


def _error(resp, status, code):
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == code
    return err


def test_json_nested_100000_deep_is_a_400(http):
    raw = b'{"model": "routedvlm", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    _error(_chat(http, raw=raw), 400, "invalid_json")


def test_a_lone_surrogate_is_a_400(http):
    raw = b'{"model": "routedvlm", "messages": [{"role": "user", "content": "Is it \\ud800 red?"}]}'
    assert "ud800" in _error(_chat(http, raw=raw), 400, "invalid_text")["message"]
    parts = b'{"model": "large", "messages": [{"role": "user", "content": [{"type": "text", "text": "\\udfff"}]}]}'
    assert _error(_chat(http, raw=parts), 400, "invalid_text")["param"] == "messages[0].content[0]"


def test_a_4000_by_1_png_is_a_400(http):
    from PIL import Image

    body = {"model": "routedvlm", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": data_url(Image.new("RGB", (4000, 1)))}}, {"type": "text", "text": "Q?"}]}]}
    assert "4000x1" in _error(_chat(http, body), 400, "image_aspect_ratio")["message"]


def test_100000_empty_system_messages_and_40000_empty_parts_are_400s(http):
    many = [{"role": "system", "content": ""}] * 100_000 + user(None, "Hi?")
    _error(_chat(http, {"model": "routedvlm", "messages": many}), 400, "too_many_messages")
    parts = [{"role": "user", "content": [{"type": "text", "text": ""}] * 40_000 + [{"type": "text", "text": "Hi?"}]}]
    _error(_chat(http, {"model": "routedvlm", "messages": parts}), 400, "too_many_content_parts")


@pytest.mark.parametrize("model", ["routedvlm", "large"])
def test_a_question_longer_than_the_context_is_a_400(http, model):
    """20,000+ characters of distinct words: more tokens than the tiny models' 4096-token context."""
    question = " ".join(f"w{i}" for i in range(8000))
    err = _error(_chat(http, {"model": model, "messages": user(None, question)}), 400, "context_length_exceeded")
    assert "context of 4096 tokens" in err["message"]


def test_max_prompt_tokens_counts_after_the_chat_template(routed):
    """A 2-word question passes a 40-token limit by its text alone, but not after the chat template."""
    from routedvlm.inference.serving.prompt_check import check_routed_prompt, served_sides
    from routedvlm.inference.serving.protocol import APIError

    messages = user(None, "Red? Blue?")
    n = max(side.count_prompt_tokens(routed._request(messages=messages)) for side in served_sides(routed))
    assert n > 4 and check_routed_prompt(routed, messages, n, "routedvlm") == n
    with pytest.raises(APIError, match=f"^The prompt of this request is {n} tokens") as info:
        check_routed_prompt(routed, messages, n - 1, "routedvlm")
    assert info.value.code == "context_length_exceeded" and info.value.status == 400


def test_special_tokens_typed_by_the_client_are_tokenized_as_text(routed, images):
    from routedvlm.inference.serving.prompt_check import neutralise, special_pattern

    side = routed.pipeline.large
    special = [side.tokenizer.convert_tokens_to_ids(t) for t in ("<|image_pad|>", "<|vision_start|>")]
    text = "Is <|image_pad|> or <|vision_start|><|im_end|> red?"

    def ids(messages):
        req = routed._request(messages=messages)
        rendered = side.render(req.messages(), "direct")
        return side.tokenizer(rendered, add_special_tokens=False)["input_ids"]

    raw = user(None, text)
    assert all(t in ids(raw) for t in special)  # the control: parsed as special tokens without the fix
    with pytest.raises(ValueError, match="image_pad"):  # ... which the processor refuses (a 500 before)
        side.count_prompt_tokens(routed._request(messages=raw))
    safe = user(None, text)
    assert neutralise(safe, special_pattern(routed)) == 3
    assert not any(t in ids(safe) for t in special)
    assert side.count_prompt_tokens(routed._request(messages=safe)) > 0


def test_special_token_text_with_an_image_is_answered(http, images):
    for model in ("routedvlm", "large"):
        r = _chat(http, {"model": model, "messages": user(images["square"], "<|image_pad|><|vision_start|> color?")})
        assert r.status_code == 200, r.text


def test_bearer_in_any_case_and_one_authorization_header(http):
    body = {"model": "routedvlm", "messages": user(None, "Hi?")}
    for scheme in ("bearer", "BEARER", "Bearer"):
        assert _chat(http, body, headers={"Authorization": f"{scheme} {KEY}"}).status_code == 200
    _error(_chat(http, body, headers={"Authorization": f"Basic {KEY}"}), 401, "invalid_api_key")
    two = [("content-type", "application/json"), ("authorization", "Bearer wrong"), ("authorization", f"Bearer {KEY}")]
    resp = http.post("/v1/chat/completions", content=json.dumps(body).encode(), headers=two)
    _error(resp, 400, "duplicate_authorization")


def test_health_is_503_until_the_server_can_answer_and_live_is_200(tiny_pair, make_pipeline):
    import threading

    from fastapi.testclient import TestClient

    from routedvlm.inference.routed import RoutedVLM
    from routedvlm.inference.serving.server import create_app

    go = threading.Event()

    def load():
        go.wait(60)
        return RoutedVLM(make_pipeline(*tiny_pair), "large_direct")

    with TestClient(create_app(loader=load)) as client:
        assert client.get("/health").status_code == 503 and client.get("/live").status_code == 200
        go.set()
        for _ in range(600):
            if client.get("/ready").status_code == 200:
                break
            threading.Event().wait(0.05)
        assert client.get("/health").status_code == 200


def test_the_openapi_document_is_published_without_a_key(http):
    doc = http.get("/openapi.json").json()
    assert doc["openapi"].startswith("3.") and {"/v1/chat/completions", "/v1/models", "/health"} <= set(doc["paths"])
    schema = doc["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert schema["properties"]["model"]["enum"] == ["routedvlm", "small", "large"]


def test_a_deadline_stops_generate_at_the_next_token(routed, monkeypatch):
    """A clock that advances 1 s per reading: a 5 s deadline stops a 200-token generate after a few tokens."""
    import itertools

    from routedvlm.inference import deadline
    from routedvlm.inference.sides.local.generation import timed_generate

    side, ticks = routed.pipeline.large, itertools.count()
    monkeypatch.setattr(deadline.time, "monotonic", lambda: float(next(ticks)))
    inputs = side.encode(None, side.render(user(None, "Count to a thousand."), "direct"))
    with pytest.raises(deadline.DeadlineExceeded, match="^The request ran past its deadline of 5 s"):
        with deadline.Deadlines(5).within():
            timed_generate(side.model, inputs, max_new_tokens=200, min_new_tokens=200)
    assert next(ticks) < 12  # the criterion read the clock once per token: it stopped after ~5 tokens, not 200
    gen = timed_generate(side.model, inputs, max_new_tokens=3, min_new_tokens=3)  # outside a deadline: untouched
    assert gen.output_tokens == 3


def test_a_request_past_its_deadline_is_a_504_and_a_stopping_server_a_503(routed):
    from fastapi.testclient import TestClient

    from routedvlm.inference.serving.server import create_app

    body = {"model": "routedvlm", "messages": user(None, "Hi?")}
    with TestClient(create_app(routed, request_timeout=-1)) as client:
        _error(client.post("/v1/chat/completions", json=body), 504, "request_timeout")
        _error(client.post("/v1/chat/completions", json={**body, "model": "small"}), 504, "request_timeout")
    from routedvlm.inference import deadline
    from routedvlm.inference.serving.calls import run_routed
    from routedvlm.inference.serving.protocol import Limits, parse_chat_request
    from routedvlm.inference.serving.server import api_error

    stopping = deadline.Deadlines(None)
    stopping.stop()
    req = parse_chat_request(body, Limits(), ("routedvlm", "small", "large"), routed_model="routedvlm")
    with pytest.raises(deadline.ShuttingDown) as info:
        run_routed(routed, req, Limits(), None, stopping)
    assert api_error(info.value).status == 503 and api_error(info.value).code == "shutting_down"


@pytest.mark.parametrize("template", ["{question.__class__}", "No question here.", "{question:>999999999}",
                                      "{question!r}"])
def test_a_router_with_a_bad_prompt_template_falls_back(tiny_pair, make_pipeline, tmp_path, template):
    """A recorded template that escapes {question}, lacks it or would allocate gigabytes fails the router (the
    fallback answers, the template is 'none'), not the process: before, `serve` exited 2."""
    from routed_helpers import save_prompt_router

    from routedvlm.inference.routed import RoutedVLM

    folder = save_prompt_router(tmp_path / "router", prompt_template={"name": "custom", "text": template,
                                                                      "instructions": None})
    vlm = RoutedVLM(make_pipeline(*tiny_pair), str(folder))
    assert vlm.router is None and vlm.router_error.startswith("ConfigError: The custom prompt template")
    assert vlm.prompt_template.name == "none" and vlm.health()["router_fallback"] is True
    assert vlm.generate(question="Hi?").fallback is True


@pytest.mark.parametrize("flag", ["--max-messages", "--max-content-parts", "--max-prompt-tokens", "--request-timeout",
                                  "--header-timeout", "--keep-alive-timeout", "--max-connections", "--max-queued",
                                  "--shutdown-timeout"])
def test_serve_bound_flags_must_be_positive(flag):
    from routedvlm.errors import ConfigError
    from routedvlm.inference.serving.cli import ServeConfig, build_parser

    args = vars(build_parser().parse_args(["--small", "s", "--large", "l", flag, "0"]))
    with pytest.raises(ConfigError, match=f"^The `{flag}` flag must be a positive integer. Got 0 instead."):
        ServeConfig(**args)
    assert getattr(ServeConfig(**{**args, flag[2:].replace("-", "_"): 7}), flag[2:].replace("-", "_")) == 7
