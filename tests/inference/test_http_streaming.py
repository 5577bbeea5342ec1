"""HTTP sides stream token by token (issue #38): `routedvlm serve` in front of an OpenAI-compatible upstream forwards
the upstream's SSE tokens as they arrive, for a routed answer (`large_direct`), an escalated one (a transfer) and a plain
model. The upstream here is a tiny local HTTP server that, after its first token, holds the rest of the reply until the
test's client has seen a content delta: the reply can only finish if that first delta reached the client before the
last token was generated (no timing thresholds; the hold's long timeout is only a failsafe, recorded as a failure)."""
import contextlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from serve_helpers import free_port, limited_server

DIRECT = ["The", " boxes", " are", " blue", " and", " red", "."]
THINK = ["<think>", "Count", " them", ".", "</think>", " Two", " boxes", " in", " all", "."]


class Upstream(BaseHTTPRequestHandler):
    """A fake OpenAI-compatible server: text replies made of fixed tokens, with logprobs; see the module docstring."""

    protocol_version = "HTTP/1.0"  # the body ends when the connection closes

    def log_message(self, *args):
        pass

    def _json(self, obj, status=200):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._json({"object": "list", "data": [{"id": m, "object": "model", "root": m, "max_model_len": 4096}
                                               for m in ("small", "large")]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        thinking = (body.get("chat_template_kwargs") or {}).get("enable_thinking", False)
        tokens = (THINK if thinking else DIRECT)[: body.get("max_tokens") or 100]
        entries = [{"token": t, "logprob": -0.1, "top_logprobs": [{"token": t, "logprob": -0.1}]} for t in tokens]
        usage = {"prompt_tokens": 12, "completion_tokens": len(tokens), "total_tokens": 12 + len(tokens),
                 "prompt_tokens_details": {"cached_tokens": 0}}
        self.server.calls.append({"model": body["model"], "stream": bool(body.get("stream"))})
        if not body.get("stream"):
            self._json({"object": "chat.completion", "choices": [{
                "index": 0, "message": {"role": "assistant", "content": "".join(tokens)}, "finish_reason": "stop",
                "logprobs": {"content": entries}}], "usage": usage})
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()

        def send(obj):
            self.wfile.write(f"data: {json.dumps(obj)}\n\n".encode())
            self.wfile.flush()

        send({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        for i, entry in enumerate(entries):
            send({"choices": [{"index": 0, "delta": {"content": entry["token"]}, "logprobs": {"content": [entry]}}]})
            if i == len(entries) // 2 and self.server.hold is not None:  # the rest waits for the client's first delta
                self.server.held.append("released" if self.server.hold.wait(120) else "timed out")
        send({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        send({"choices": [], "usage": usage})
        self.wfile.write(b"data: [DONE]\n\n")


@contextlib.contextmanager
def upstream():
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Upstream)
    server.calls, server.held, server.hold = [], [], None
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def stream_chat(port, body, on_first_content):
    """POST a streamed chat to the serve app: (content deltas, reasoning deltas, headers); `on_first_content()` runs
    when the first non-empty content delta arrives."""
    import httpx

    content, reasoning = [], []
    with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/chat/completions", json={**body, "stream": True},
                      timeout=300) as resp:
        assert resp.status_code == 200, resp.read()
        for line in resp.iter_lines():
            if not line.startswith("data:") or line.strip() == "data: [DONE]":
                continue
            event = json.loads(line[5:])
            assert "error" not in event, event
            for choice in event.get("choices") or []:
                delta = choice.get("delta") or {}
                if delta.get("content"):
                    if not content:
                        on_first_content()
                    content.append(delta["content"])
                if delta.get("reasoning"):
                    reasoning.append(delta["reasoning"])
        return content, reasoning, resp.headers


@pytest.fixture
def fronted(monkeypatch):
    """A factory: `routedvlm serve`'s app for router `strategy` with both sides on the fake upstream, under uvicorn."""
    from routedvlm.inference.routed import RoutedVLM
    from routedvlm.inference.serving.server import create_app

    monkeypatch.setenv("ROUTEDVLM_REQUIRE_PREFIX_CACHE", "0")

    @contextlib.contextmanager
    def make(strategy):
        with upstream() as up:
            url = f"http://127.0.0.1:{up.server_address[1]}/v1"
            routed = RoutedVLM.from_pretrained(f"{url}#small", f"{url}#large", strategy, max_direct_tokens=16,
                                               max_reason_tokens=16)
            with limited_server(create_app(routed)) as port:
                yield up, port

    return make


def question():
    return [{"role": "user", "content": "How many boxes?"}]


@pytest.mark.parametrize("strategy", ["large_direct", "transfer_8"])
def test_routed_answers_over_http_stream_token_by_token(fronted, strategy):
    with fronted(strategy) as (up, port):
        up.hold = threading.Event()
        content, _, headers = stream_chat(port, {"model": "routedvlm", "messages": question()}, up.hold.set)
        up.hold = None
        import httpx

        whole = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions",
                           json={"model": "routedvlm", "messages": question()}, timeout=300).json()
    assert headers["x-routedvlm-strategy"] == strategy
    assert up.held == ["released"]  # the client saw a delta while the upstream was still holding its last tokens
    assert len(content) > 1 and "".join(content) == whole["choices"][0]["message"]["content"] == "The boxes are blue and red."
    answer_calls = [c for c in up.calls if c["model"] == "large"]
    assert answer_calls[0]["stream"] and not answer_calls[-1]["stream"]  # streamed only when the client streams
    if strategy == "transfer_8":  # the small model's reasoning is not a visible answer: asked for in one piece
        assert not any(c["stream"] for c in up.calls if c["model"] == "small")


def test_plain_model_over_http_streams_reasoning_and_answer(fronted):
    with fronted("large_direct") as (up, port):
        up.hold = threading.Event()
        content, reasoning, headers = stream_chat(port, {"model": "small", "messages": question()}, up.hold.set)
        up.hold = None
        import httpx

        whole = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions",
                           json={"model": "small", "messages": question()}, timeout=300).json()
    msg = whole["choices"][0]["message"]
    assert headers["x-routedvlm-answer-model"] == "small" and up.held == ["released"]
    assert len(reasoning) > 1 and "".join(reasoning) == msg["reasoning"] == "Count them."
    assert "".join(content) == msg["content"] == "Two boxes in all."
    assert whole["usage"]["completion_tokens_details"]["reasoning_tokens"] == 4


def test_a_streamed_replys_stop_token_is_not_handed_on_but_a_special_token_inside_it_is():
    """vLLM (`skip_special_tokens: false`) lists the stop token `<|im_end|>` in a stream's logprobs but not in its text;
    one inside the reply (`ignore_eos`) is in both. Found against real vLLM: the relayed answer ended in `<|im_end|>`."""
    from routedvlm.inference.sides.http.sse import ReplyBuilder

    def relay(tokens):
        builder, out = ReplyBuilder(), []
        for t in tokens:
            out += builder.add({"choices": [{"index": 0, "delta": {"content": t},
                                             "logprobs": {"content": [{"token": t, "logprob": -1.0}]}}]})
        return out

    assert relay(["2", "<|im_end|>"]) == ["2"]
    assert relay(["2", "<|im_end|>", "1", "<|im_end|>"]) == ["2", "<|im_end|>", "1"]
