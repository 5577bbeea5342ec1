"""`routedvlm serve` with a ladder of models: `--model` repeated (cheapest first), plain models named by alias, and the
headers / `/metrics` naming the models that ran (worked on the pair in process; ladders: test_routed_ladder.py)."""
import subprocess
import sys

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
    bad = subprocess.run([sys.executable, "-m", "routedvlm.training.cli", "serve", "--model", "only-one"],
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
