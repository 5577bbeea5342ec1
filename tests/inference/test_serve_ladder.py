"""`routedvlm serve` with a ladder of models: `--model` repeated (cheapest first), plain models named by alias, and the
headers / `/metrics` naming the models that ran (worked on the pair in process; ladders: test_routed_ladder.py)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from routed_helpers import expected_route, save_prompt_router
from serve_helpers import user

from routedvlm.errors import ConfigError

SHORT, LONG = "Color?", "Count the boxes, then say how many are blue and how many green."


def _cfg(*argv):
    from routedvlm.inference.serving.cli import ServeConfig, build_parser

    return ServeConfig(**vars(build_parser().parse_args(list(argv))))


def test_model_repeated_is_a_ladder_cheapest_first_and_small_large_stay():
    ladder = _cfg("--model", "./2b", "--model", "http://h:1/v1#4b", "--model", "./8b")
    assert ladder.models == ["./2b", "http://h:1/v1#4b", "./8b"] and ladder.aliases == ("small", "mid", "large")
    assert _cfg("--small", "./2b", "--model", "./4b", "--large", "./8b").models == ["./2b", "./4b", "./8b"]
    pair = _cfg("--small", "./2b", "--large", "./8b")
    assert pair.models == ["./2b", "./8b"] and pair.aliases == ("small", "large")
    four = _cfg(*[arg for m in ("a", "b", "c", "d") for arg in ("--model", m)])
    assert four.aliases == ("small", "mid1", "mid2", "large")


@pytest.mark.parametrize("argv, got", [(("--model", "a"), "Got 1 model."), (("--large", "a"), "Got 1 model."),
                                       ((), "Got 0 models."), (("--small", "a", "--large", " "), "Got an empty model.")])
def test_fewer_than_two_models_is_a_clear_error(argv, got):
    with pytest.raises(ConfigError, match=r"^`routedvlm serve` needs 2 to 10 models, cheapest first: `--small S --large L`, "
                                          r"or `--model` repeated \(`--model S --model M --model L`\)\. " + got):
        _cfg(*argv)


def test_the_routed_model_name_must_not_be_a_plain_model_id():
    with pytest.raises(ConfigError, match=r"^The `--served-model-name` flag must differ from the plain models' ids "
                                          r"\['small', 'mid', 'large'\]\. Got 'mid'\."):
        _cfg("--model", "a", "--model", "b", "--model", "c", "--served-model-name", "mid")


def test_help_teaches_the_ladder_and_bad_ladders_exit_2():
    from routedvlm.inference.serving.cli import build_parser

    text = " ".join(build_parser().format_help().split())
    assert "--model SPEC" in text and "repeat it: --model S --model M --model L" in text
    assert "routedvlm serve --model ./2b --model http://gpu1:8001/v1#Qwen/Qwen3-VL-4B-Instruct" in text
    bad = subprocess.run([sys.executable, "-m", "routedvlm.cli", "serve", "--model", "only-one"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("error: `routedvlm serve` needs 2 to 10 models")


# ---- the pair in process: headers and /metrics name the models that ran ----
@pytest.fixture(scope="module")
def pair_http(tiny_pair, make_pipeline, tmp_path_factory):
    from fastapi.testclient import TestClient

    from routedvlm.inference.routed import RoutedVLM
    from routedvlm.inference.serving.server import create_app

    folder = save_prompt_router(tmp_path_factory.mktemp("ladder-serve") / "router")
    routed = RoutedVLM(make_pipeline(*tiny_pair), str(folder))
    with TestClient(create_app(routed)) as http:
        yield http


def _metrics(http) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(http.get("/metrics").text) for s in f.samples}


def test_headers_body_and_metrics_name_the_models_that_ran(pair_http, images):
    before = _metrics(pair_http)
    short = pair_http.post("/v1/chat/completions", json={"model": "routedvlm", "messages": user(images["square"], SHORT)})
    long = pair_http.post("/v1/chat/completions", json={"model": "routedvlm", "messages": user(images["square"], LONG)})
    plain = pair_http.post("/v1/chat/completions", json={"model": "large", "messages": user(images["square"], SHORT),
                                                         "chat_template_kwargs": {"enable_thinking": False}})
    assert (expected_route(SHORT), expected_route(LONG)) == ("small_direct", "transfer_8")
    assert short.headers["x-routedvlm-strategy"] == "small_direct"  # the pair's header names stay
    assert (short.headers["x-routedvlm-models"], short.headers["x-routedvlm-answer-model"]) == ("small", "small")
    assert (long.headers["x-routedvlm-models"], long.headers["x-routedvlm-answer-model"]) == ("small,large", "large")
    assert (plain.headers["x-routedvlm-models"], plain.headers["x-routedvlm-answer-model"]) == ("large", "large")
    info = long.json()["routedvlm"]
    assert info["models"] == ["small", "large"] and info["answer_model"] == "large"
    assert [r["model"] for r in info["trace"] if r["stage"] != "decision"] == ["small", "large"]
    after = _metrics(pair_http)

    def grew(name, model):
        key = (name, (("model", model),))
        return after.get(key, 0) - before.get(key, 0)

    assert [grew("routedvlm_model_runs_total", m) for m in ("small", "large")] == [2, 2]
    assert [grew("routedvlm_answers_total", m) for m in ("small", "large")] == [1, 2]


def test_a_stream_names_its_models_in_the_headers(pair_http, images):
    body = {"model": "routedvlm", "stream": True, "messages": user(images["square"], LONG)}
    with pair_http.stream("POST", "/v1/chat/completions", json=body) as r:
        text = "".join(r.iter_text())
    assert r.status_code == 200 and text.endswith("data: [DONE]\n\n")
    assert (r.headers["x-routedvlm-models"], r.headers["x-routedvlm-answer-model"]) == ("small,large", "large")


def test_plain_model_ids_follow_the_pipeline_s_aliases(tiny_pair, make_pipeline):
    from fastapi.testclient import TestClient

    from routedvlm.inference.routed import RoutedVLM
    from routedvlm.inference.serving.server import create_app

    routed = RoutedVLM(make_pipeline(*tiny_pair), "large_direct")
    with TestClient(create_app(routed)) as http:
        ids = [m["id"] for m in http.get("/v1/models").json()["data"]]
        missing = http.post("/v1/chat/completions", json={"model": "mid", "messages": [{"role": "user", "content": "Q"}]})
    assert ids == ["routedvlm", "small", "large"]
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
    with pytest.raises(ConfigError, match=r"^The served model name must differ from the plain models' ids"):
        create_app(routed, served_model="small")


# ---- `routedvlm serve --model x3` on the shipped toy checkpoints (the large one twice: `mid` answers as `large`), and
# a RoutedVLM over that server's three plain models: a ladder of OpenAI-compatible endpoints ----
TOY = Path(__file__).resolve().parents[2] / "data" / "toyworld" / "checkpoints"
TOY_FLAGS = ["--max-direct-tokens", "8", "--max-reason-tokens", "48", "--device", "cpu", "--threads", "1"]
TOY_Q = "How many red boxes are there?"


@pytest.fixture(scope="module")
def served_ladder(tmp_path_factory):
    from serve_helpers import KEY, serve_process

    root = tmp_path_factory.mktemp("serve-ladder")
    args = ["--model", str(TOY / "small"), "--model", str(TOY / "large"), "--model", str(TOY / "large"),
            "--router", "transfer_small_mid_8", "--api-key", KEY, "--log-level", "warning", *TOY_FLAGS]
    with serve_process(args, root / "server.log") as (url, proc):
        yield url


@pytest.fixture(scope="module")
def toy_pair():
    from routedvlm.inference import VLM, CollaborativePipeline

    small, large = (VLM.from_pretrained(TOY / name, device="cpu") for name in ("small", "large"))
    return CollaborativePipeline(small, large, max_direct_tokens=8, max_reason_tokens=48)


def _scrape(url) -> dict:
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(httpx.get(f"{url}/metrics").text) for s in f.samples}


def test_serve_a_ladder_lists_and_answers_every_model_by_alias(served_ladder, toy_pair, images):
    import httpx
    from serve_helpers import KEY, post

    auth = {"Authorization": f"Bearer {KEY}"}
    ids = [m["id"] for m in httpx.get(f"{served_ladder}/v1/models", headers=auth).json()["data"]]
    assert ids == ["routedvlm", "small", "mid", "large"]
    before = _scrape(served_ladder)
    routed = post(served_ladder, {"model": "routedvlm", "messages": user(images["square"], TOY_Q)})
    assert routed.status_code == 200 and routed.headers["x-routedvlm-strategy"] == "transfer_small_mid_8"
    assert (routed.headers["x-routedvlm-models"], routed.headers["x-routedvlm-answer-model"]) == ("small,mid", "mid")
    answer = toy_pair.run(images["square"], TOY_Q, "transfer_8").answer
    assert routed.json()["choices"][0]["message"]["content"] == answer
    mid = post(served_ladder, {"model": "mid", "messages": user(images["square"], TOY_Q), "max_tokens": 8,
                               "chat_template_kwargs": {"enable_thinking": False}})
    assert mid.status_code == 200 and mid.headers["x-routedvlm-answer-model"] == "mid"
    assert mid.json()["choices"][0]["message"]["content"] == toy_pair.run(images["square"], TOY_Q, "large_direct").answer
    body = {"model": "routedvlm", "stream": True, "messages": user(images["square"], TOY_Q)}
    with httpx.stream("POST", f"{served_ladder}/v1/chat/completions", json=body, headers=auth, timeout=120) as r:
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert (r.headers["x-routedvlm-models"], r.headers["x-routedvlm-answer-model"]) == ("small,mid", "mid")
    chunks = [json.loads(e) for e in events if e != "[DONE]"]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == answer
    after = _scrape(served_ladder)

    def grew(name, model):
        key = (name, (("model", model),))
        return after.get(key, 0) - before.get(key, 0)

    assert [grew("routedvlm_model_runs_total", m) for m in ("small", "mid", "large")] == [2, 3, 0]
    assert [grew("routedvlm_answers_total", m) for m in ("small", "mid", "large")] == [0, 3, 0]


@pytest.mark.parametrize("strategy, same_as", [("mid_direct", "large_direct"), ("transfer_small_mid_8", "transfer_8"),
                                               ("small_direct", "small_direct")])
def test_a_ladder_of_openai_compatible_endpoints(served_ladder, toy_pair, images, monkeypatch, strategy, same_as):
    from fastapi.testclient import TestClient
    from serve_helpers import KEY

    from routedvlm.inference.routed import RoutedVLM
    from routedvlm.inference.serving.server import create_app

    monkeypatch.setenv("ROUTEDVLM_BACKEND_API_KEY", KEY)
    url = f"{served_ladder}/v1"
    remote = RoutedVLM.from_pretrained([f"{url}#small", f"{url}#mid", f"{url}#large"], strategy,
                                       max_direct_tokens=8, max_reason_tokens=48)
    assert remote.pipeline.aliases == ("small", "mid", "large") and not hasattr(remote.lock, "acquire")
    assert remote.pipeline.sides["mid"].name == f"{url}#mid"
    with TestClient(create_app(remote)) as http:
        r = http.post("/v1/chat/completions", json={"model": "routedvlm", "messages": user(images["wide"], TOY_Q)})
    assert r.status_code == 200 and r.headers["x-routedvlm-strategy"] == strategy
    models = {"mid_direct": "mid", "transfer_small_mid_8": "small,mid", "small_direct": "small"}[strategy]
    assert r.headers["x-routedvlm-models"] == models and r.headers["x-routedvlm-answer-model"] == models.split(",")[-1]
    trace = [t for t in r.json()["routedvlm"]["trace"] if t["model"]]
    assert all(t["remote"] for t in trace) and ",".join(dict.fromkeys(t["model"] for t in trace)) == models
    assert r.json()["choices"][0]["message"]["content"] == toy_pair.run(images["wide"], TOY_Q, same_as).answer


def test_a_mixed_ladder_of_local_checkpoints_and_an_endpoint(served_ladder, toy_pair, images, monkeypatch):
    """Local small and large with `mid` behind the server: the small model's reasoning goes over HTTP to mid."""
    from serve_helpers import KEY

    from routedvlm.inference.routed import RoutedVLM

    monkeypatch.setenv("ROUTEDVLM_BACKEND_API_KEY", KEY)
    mixed = RoutedVLM.from_pretrained([TOY / "small", f"{served_ladder}/v1#mid", TOY / "large"], "transfer_small_mid_8",
                                      max_direct_tokens=8, max_reason_tokens=48, device="cpu")
    assert hasattr(mixed.lock, "acquire")  # local models share the lock
    out = mixed(image=images["tall"], question=TOY_Q)
    remote = {r["model"]: bool(r.get("remote")) for r in out.trace if r["model"]}
    assert out.models == ["small", "mid"] and remote == {"small": False, "mid": True}
    assert out.text == toy_pair.run(images["tall"], TOY_Q, "transfer_8").answer
