"""`routedvlm profile --model <base_url>#<id>`: streamed timing of a server model, against a fake OpenAI-compatible
streaming server on loopback (prompt tokens = words + 16 per image, 4 of them cached; one token per chunk)."""
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

IMAGE_TOKENS, CACHED = 16, 4


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.bodies.append(body)
        if body["model"] != "toy":
            self.send_response(404)
            self.end_headers()
            self.wfile.write(b'{"error": {"message": "no such model"}}')
            return
        parts = body["messages"][0]["content"]
        words = sum(len(p["text"].split()) for p in parts if p["type"] == "text")
        prompt = words + IMAGE_TOKENS * sum(p["type"] == "image_url" for p in parts)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        time.sleep(0.001)
        for i in range(body["max_tokens"]):
            chunk = {"choices": [{"index": 0, "delta": {"content": f"t{i} "},
                                  "logprobs": {"content": [{"token": f"t{i}", "logprob": -0.1}]}}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
            time.sleep(0.001)
        usage = {"prompt_tokens": prompt, "completion_tokens": body["max_tokens"],
                 "prompt_tokens_details": {"cached_tokens": CACHED}}
        self.wfile.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\ndata: [DONE]\n\n".encode())


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.bodies = []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd, f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def test_a_server_model_is_profiled_from_streamed_tokens(server, tmp_path, capsys):
    from routedvlm.inference.profiling.latency_model import LatencyModel, cost_stage_fn
    from routedvlm.inference.profiling.cli import main

    httpd, url = server
    spec = f"{url}#toy"
    out = tmp_path / "profile.json"
    assert main(["--model", spec, "--image-sizes", "32,64", "--prompt-tokens", "4,12", "--output-tokens", "1,3,6",
                 "--repeats", "2", "--out", str(out), "--no-progress"]) == 0
    profile = json.loads(out.read_text())
    entry = profile["models"]["toy"]
    assert entry["path"] == spec and entry["remote"] == {"base_url": url, "model": "toy", "streamed": True,
                                                          "requests_in_flight": 1}
    assert profile["hardware"] == {"device": "remote", "servers": [url]}
    meas = entry["measurements"]
    assert {r["tokens"] for r in meas["prefill"]} == {w + 1 + IMAGE_TOKENS - CACHED for w in (4, 12)}  # nonce + words
    assert all(len(d["step_ms"]) == 5 for d in meas["decode"])  # 6 tokens at the reference size: 5 decode steps
    assert entry["image_tokens"] == {"32": IMAGE_TOKENS, "64": IMAGE_TOKENS}
    assert entry["fit"]["vision"]["slope"] == 0 and entry["fit"]["vision"]["intercept"] == 0
    sent = httpd.bodies[-1]
    assert sent["stream"] and sent["min_tokens"] == sent["max_tokens"] and sent["ignore_eos"]
    images = [p["image_url"]["url"] for b in httpd.bodies for p in b["messages"][0]["content"] if p["type"] == "image_url"]
    assert len(set(images)) == len(images)  # a fresh image every call: the prefix cache cannot hide the prefill
    LatencyModel.load(out, "toy")
    stage_ms, meta = cost_stage_fn(out, small_path=spec, large_path=spec)
    assert meta["cost_models"] == {"small": "toy", "large": "toy"}
    assert stage_ms("large", {"vision_ms": 0, "prefill_tokens": 10, "cached_tokens": 0, "decode_tokens": 3}) >= 0
    assert "remote" in capsys.readouterr().out


def test_a_wrong_model_id_is_one_clear_error(server, tmp_path):
    from routedvlm.inference.profiling.cli import main
    from routedvlm.errors import BackendError, ConfigError

    _, url = server
    with pytest.raises(BackendError, match=rf"^The OpenAI-compatible server {url} refused a profiling request for "
                                           r"'nope': HTTP 404: .*no such model"):
        main(["--model", f"{url}#nope", "--image-sizes", "32", "--prompt-tokens", "4", "--output-tokens", "2",
              "--repeats", "1", "--out", str(tmp_path / "p.json"), "--no-progress"])
    from routedvlm.inference.profiling.remote import parse_remote

    with pytest.raises(ConfigError, match=r"^A remote model must be given as '<base_url>#<model id>'"):
        parse_remote("http://127.0.0.1:1/v1#")
