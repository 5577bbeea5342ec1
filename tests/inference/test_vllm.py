"""Against REAL vLLM servers on the shipped toy pair (`make vllm-env vllm-up`; marked `vllm`, run by `make test-vllm`):
every strategy's answer over vLLM equals the local transformers backend's, the escalation reuses the server's cached
prefix, both reply shapes (with and without a reasoning parser) split the same way, and RoutedVLM / `routedvlm serve`
answer in front of the two servers under a LightGBM router trained on the bundled toy labels."""
import json
import socket
import subprocess
import sys
import time

import pytest
from serve_helpers import stop_process

pytestmark = pytest.mark.vllm
STRATEGIES = ["small_direct", "large_direct", "small_reason", "large_reason", "transfer_4", "transfer_8", "transfer_16",
              "transfer_all"]
N_SAMPLES = 20


def _toy_settings():
    from routedvlm.data.toyworld.make_labels import MAX_DIRECT_TOKENS, MAX_REASON_TOKENS, TOY_K_GRID

    return dict(selector="prefix", k_grid=TOY_K_GRID, max_direct_tokens=MAX_DIRECT_TOKENS,
                max_reason_tokens=MAX_REASON_TOKENS)


@pytest.fixture(scope="module")
def toy_samples():
    from routedvlm.data.toyworld.task import make_samples

    # fixed samples: CI starts fresh servers, and the labeller's calls are cache-salted, so earlier runs against a
    # long-lived dev server cannot inflate what the reuse assertions read (escalate's only bound is a multiple of 32)
    return make_samples("eval", N_SAMPLES, seed=12)


@pytest.fixture(scope="module")
def pipes(vllm_servers):
    from routedvlm.data.toyworld.make_labels import checkpoint_pair
    from routedvlm.inference import VLM, CollaborativePipeline
    from routedvlm.inference.sides import load_side as connect

    small, large = checkpoint_pair()
    local = CollaborativePipeline(VLM.from_pretrained(small), VLM.from_pretrained(large), **_toy_settings())
    remote = CollaborativePipeline(connect(vllm_servers["small"]), connect(vllm_servers["large"]), **_toy_settings())
    return local, remote


@pytest.fixture(scope="module")
def shared_runs(pipes, toy_samples):
    local, remote = pipes
    return [(local.run_many(s.image, s.question, STRATEGIES), remote.run_many(s.image, s.question, STRATEGIES))
            for s in toy_samples]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_over_vllm_answers_as_the_local_backend(shared_runs, strategy):
    pairs = [(a[strategy], b[strategy]) for a, b in shared_runs]
    assert [b.answer for _, b in pairs] == [a.answer for a, _ in pairs]
    if strategy.endswith("_reason") or strategy.startswith("transfer_"):
        assert [b.reasoning for _, b in pairs] == [a.reasoning for a, _ in pairs]
    if strategy.startswith("transfer_"):
        assert [b.keep_tokens for _, b in pairs] == [a.keep_tokens for a, _ in pairs]
    assert all(r["remote"] for _, b in pairs for r in b.trace)


def test_single_runs_over_vllm_equal_the_local_backend(pipes, toy_samples):
    local, remote = pipes
    for s in toy_samples[:4]:
        for strategy in STRATEGIES:
            assert remote.run(s.image, s.question, strategy).answer == local.run(s.image, s.question, strategy).answer


def test_logprobs_over_vllm_match_the_local_model(shared_runs):
    for a, b in shared_runs[:5]:
        for strategy in ("small_direct", "large_direct"):
            assert b[strategy].token_logprobs == pytest.approx(a[strategy].token_logprobs, abs=1e-4)


def test_escalation_reuses_the_servers_cached_prefix(pipes, toy_samples, shared_runs):
    local, remote = pipes
    for s, (a, _) in zip(toy_samples, shared_runs):
        first = remote.run(s.image, s.question, "large_direct")
        second = remote.escalate(first, 8)
        assert second.answer == a["transfer_8"].answer
        direct, esc = first.trace[-1], second.trace[-1]
        assert esc["stage"] == "escalate" and esc["cached_tokens"] > 0 and esc["cached_tokens"] % 32 == 0
        assert esc["cached_tokens"] <= direct["prefill_tokens"] + direct["cached_tokens"]


def test_labelling_runs_measure_the_two_stage_reuse_in_isolation(shared_runs):
    """run_many's transfer calls reuse exactly the large_direct prefix: 32 of the shared prompt tokens (one block)."""
    for _, b in shared_runs:
        for k in ("transfer_4", "transfer_8", "transfer_16", "transfer_all"):
            prefix, call = b[k].trace[-2], b[k].trace[-1]
            assert (prefix["stage"], call["stage"]) == ("large_prefix", "large_transfer")
            assert call["cached_tokens"] == prefix["prefill_tokens"] == 32 and "cold_ms" in prefix


def test_both_reply_shapes_occur_and_split_alike(vllm_servers, toy_samples):
    """The small server runs vLLM's qwen3 reasoning parser, the large one none: raw replies differ, splits agree."""
    from routedvlm.inference.sides.http.openai_replies import logprob_tokens, message, split_reasoning
    from routedvlm.inference.sides import load_side as connect
    from routedvlm.inference.inputs import make_request

    s = toy_samples[0]
    req = make_request(s.image, s.question)
    small, large = connect(vllm_servers["small"]), connect(vllm_servers["large"])
    _, with_parser = small.chat(req, s.question, thinking=True, max_tokens=48)
    _, without = large.chat(req, s.question, thinking=True, max_tokens=48)
    msg_p, msg_n = message(with_parser), message(without)
    assert (msg_p.get("reasoning_content") or msg_p.get("reasoning")) and "</think>" not in (msg_p.get("content") or "")
    assert not (msg_n.get("reasoning_content") or msg_n.get("reasoning")) and "</think>" in msg_n["content"]
    for resp in (with_parser, without):
        reasoning, answer = split_reasoning(message(resp), logprob_tokens(resp))
        assert reasoning.startswith("red=") and reasoning.endswith("\n") and answer and answer.isdigit()


# ----- RoutedVLM and routedvlm serve in front of the two servers ----------------------------------------------------
@pytest.fixture(scope="module")
def toy_router(tmp_path_factory):
    """A cascade LightGBM router trained (no MLflow) on the bundled toy labels."""
    from routedvlm.cli import train_router_main

    out = tmp_path_factory.mktemp("toy-router")
    assert train_router_main(["--output-dir", str(out), "--no-mlflow"]) == 0
    return out / "router"


@pytest.fixture(scope="module")
def routed(vllm_servers, toy_router):
    """(local RoutedVLM, RoutedVLM over the two vLLM servers), same router and settings."""
    from routedvlm.data.toyworld.make_labels import checkpoint_pair
    from routedvlm.inference import RoutedVLM

    kw = dict(k_grid=_toy_settings()["k_grid"], max_direct_tokens=8, max_reason_tokens=48)
    local = RoutedVLM.from_pretrained(*map(str, checkpoint_pair()), str(toy_router), **kw)
    return local, RoutedVLM.from_pretrained(vllm_servers["small"], vllm_servers["large"], str(toy_router), **kw)


def test_routed_vlm_over_vllm_takes_the_local_route(routed, toy_samples):
    local, remote = routed
    assert remote.router is not None and remote.router.policy.router_type == "lightgbm"
    routes = []
    for s in toy_samples[:10]:
        a, b = local(image=s.image, question=s.question), remote(image=s.image, question=s.question)
        assert (b.strategy, b.text) == (a.strategy, a.text)
        routes.append(b.strategy)
    assert "large_direct" in routes


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_routedvlm_serve_in_front_of_the_vllm_servers(vllm_servers, toy_router, routed, toy_samples, tmp_path):
    import httpx

    from routedvlm.inference.sides.http.openai_replies import image_data_url

    port = _free_port()
    cmd = [sys.executable, "-m", "routedvlm.cli", "serve", "--small", vllm_servers["small"], "--large",
           vllm_servers["large"], "--router", str(toy_router), "--port", str(port), "--max-direct-tokens", "8",
           "--max-reason-tokens", "48", "--log-level", "warning"]
    log = open(tmp_path / "serve.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/ready", timeout=5).status_code == 200:  # loaded in the background
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "routedvlm serve did not start within 180 s"
            time.sleep(0.5)
        for s in toy_samples[:5]:
            body = {"model": "routedvlm", "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": image_data_url(s.image)}}, {"type": "text", "text": s.question}]}]}
            resp = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=120)
            assert resp.status_code == 200, resp.text
            out, ref = resp.json(), routed[0](image=s.image, question=s.question)
            assert resp.headers["x-routedvlm-strategy"] == ref.strategy
            assert out["choices"][0]["message"]["content"].strip() == ref.text
            assert all(r["remote"] for r in out["routedvlm"]["trace"] if r.get("model")), json.dumps(out)[:500]
    finally:
        stop_process(proc)
        log.close()
