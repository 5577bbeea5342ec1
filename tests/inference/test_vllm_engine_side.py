"""The in-process vLLM engine side without vLLM (the normal suite): the spec, lazy engine start, prompts rendered as
the local side renders them, the driver thread's batching of calls from many threads (a fake engine), and what the
labeller makes of engine sides. With vLLM itself: tests/inference/test_vllm_engine.py (marked `vllm_engine`)."""
import sys
import threading
from types import SimpleNamespace

import pytest

from routedvlm.errors import BackendError, ConfigError, ModeUnavailableError


@pytest.fixture(scope="module")
def pair():
    from routedvlm.data.toyworld.make_labels import checkpoint_pair

    return [str(p) for p in checkpoint_pair()]


def test_vllm_spec_loads_an_engine_side_without_starting_vllm(pair, monkeypatch):
    from routedvlm.inference.sides import load_side
    from routedvlm.inference.sides.vllm.side import VLLMEngine

    monkeypatch.setitem(sys.modules, "vllm", None)  # no vLLM here: building the side must not need it
    side = load_side(f"vllm:{pair[1]}")
    assert isinstance(side, VLLMEngine) and side.name == pair[1] and side._driver is None
    assert side.describe()["engine"] == "vllm" and not side.stateful
    with pytest.raises(ModeUnavailableError, match=r"^The side vllm:.* needs vLLM in this environment \(`make vllm-env`"):
        side.driver


def test_engine_side_renders_the_local_sides_prompts(pair):
    from routedvlm.inference.inputs import make_request
    from routedvlm.inference.sides.local.side import VLM
    from routedvlm.inference.sides.vllm.side import VLLMEngine
    from PIL import Image

    local, engine = VLM.from_pretrained(pair[0], device="cpu"), VLLMEngine(pair[0])
    req = make_request(Image.new("RGB", (32, 32), "white"), "How many red bars?", None)
    assert engine.style == local.style
    for mode in ("direct", "reason"):
        assert engine.render(req.messages(), mode) == local.render(req.messages(), mode)
    assert engine.eos_ids() == local.eos_ids() and engine.context_length() == local.context_length()


def test_engine_prompts_name_each_samples_image_by_its_content_once(pair):
    """The engine keys its multimodal caches and the image's prefix-cache blocks by `multi_modal_uuids`: one key per
    image content (never two images under one key: a wrong key would reuse another image's KV blocks), computed once
    per sample rather than hashed again by vLLM for each of its calls."""
    from PIL import Image

    from routedvlm.inference.inputs import make_request
    from routedvlm.inference.sides.vllm.side import VLLMEngine

    side = VLLMEngine(pair[0])
    white = make_request(Image.new("RGB", (32, 32), "white"), "How many red bars?", None)
    again = make_request(Image.new("RGB", (32, 32), "white"), "Which colour?", None)
    dot = Image.new("RGB", (32, 32), "white")
    dot.putpixel((5, 7), (255, 0, 0))
    other = make_request(dot, "How many red bars?", None)
    wide = make_request(Image.new("RGB", (64, 16), "white"), "How many red bars?", None)
    keys = [side.prompt_for(r, "text", None)["multi_modal_uuids"]["image"] for r in (white, again, other, wide)]
    assert all(len(k) == 1 for k in keys)
    assert keys[0] == keys[1] and len({k[0] for k in keys[1:]}) == 3
    white.image.putpixel((0, 0), (0, 0, 0))  # computed once per request: the sample's calls all carry the first key
    assert side.prompt_for(white, "direct", "salt")["multi_modal_uuids"] == {"image": keys[0]}
    assert "multi_modal_uuids" not in side.prompt_for(make_request(None, "Text only?", None), "text", None)


def test_an_engine_start_freezes_the_gc_heap_and_close_unfreezes_it(pair, monkeypatch):
    """Regression: with an engine in the process a full cyclic collection took ~0.9 s and stalled every sample in
    flight; the side now freezes the heap once its engine is built (as vLLM's engine core does) and unfreezes it
    when it closes."""
    import gc
    import types

    from routedvlm.inference.sides.vllm.side import VLLMEngine

    class LLM:
        def __init__(self, model, **kwargs):
            self.llm_engine = types.SimpleNamespace(engine_core=None)

        def enqueue(self, prompts, params, use_tqdm=False):
            return []

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=LLM))
    gc.unfreeze()
    side = VLLMEngine(pair[0])
    try:
        side.driver
        assert gc.get_freeze_count() > 0
    finally:
        side.close()
    assert gc.get_freeze_count() == 0


def test_capture_hidden_needs_the_hidden_module_and_an_unstarted_engine(pair, monkeypatch):
    from routedvlm.inference.sides.vllm.side import VLLMEngine

    side = VLLMEngine(pair[1])
    monkeypatch.setitem(sys.modules, "routedvlm.inference.sides.vllm.hidden", None)
    with pytest.raises(ModeUnavailableError, match=r"^vllm:.* cannot capture hidden states"):
        side.capture_hidden([1])
    monkeypatch.delitem(sys.modules, "routedvlm.inference.sides.vllm.hidden")
    side._extractable = True  # as for a Qwen3-VL checkpoint
    side._driver = object()  # the engine has answered a call already
    with pytest.raises(ConfigError, match=r"^capture_hidden\(\[1\]\) must be called before the first call"):
        side.capture_hidden([1])


def test_engine_args_come_from_defaults_environment_and_caller(monkeypatch):
    from routedvlm.inference.sides.vllm.side import ENGINE_ARGS_ENV, resolve_engine_args

    monkeypatch.setenv("VLLM_TARGET_DEVICE", "cpu")
    monkeypatch.setenv(ENGINE_ARGS_ENV, '{"max_num_seqs": 64, "block_size": 64}')
    args = resolve_engine_args({"max_num_seqs": 8})
    assert args["enable_prefix_caching"] and args["max_num_seqs"] == 8 and args["block_size"] == 64
    assert args["dtype"] == "float32" and args["enforce_eager"]
    monkeypatch.setenv(ENGINE_ARGS_ENV, "[1]")
    with pytest.raises(ConfigError, match=r"^\$ROUTEDVLM_VLLM_ENGINE_ARGS must be a JSON object"):
        resolve_engine_args()


class FakeLLM:
    """enqueue/step like vllm.LLM: every step finishes all requests added so far (ids like vLLM's internal ones)."""

    def __init__(self, fail_on=None):
        self.batches, self.waiting, self.n, self.fail_on = [], [], 0, fail_on
        self.llm_engine = self

    def enqueue(self, prompts, params, use_tqdm=False):
        if self.fail_on in prompts:
            raise ValueError(f"bad prompt {self.fail_on}")
        self.batches.append(list(prompts))
        ids = []
        for p in prompts:
            ids.append(f"{self.n}-abcdefgh")
            self.waiting.append((str(self.n), p))
            self.n += 1
        return ids

    def step(self):
        done, self.waiting = self.waiting, []
        return [SimpleNamespace(request_id=rid, finished=True, prompt=p) for rid, p in done]


def test_driver_batches_calls_from_many_threads_and_fails_only_a_bad_request():
    from routedvlm.inference.sides.vllm.driver import EngineDriver

    llm = FakeLLM(fail_on="bad")
    driver = EngineDriver(llm, name="fake")
    gate = threading.Barrier(9)
    results = {}

    def call(i):
        gate.wait()
        results[i] = driver.submit(f"p{i}", None)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    gate.wait()
    for t in threads:
        t.join()
    assert {i: f.result(timeout=10).prompt for i, f in results.items()} == {i: f"p{i}" for i in range(8)}
    assert driver.run(["x", "y", "z"], [None] * 3)[2].prompt == "z"
    bad, good = driver.submit("bad", None), driver.submit("ok", None)
    with pytest.raises(ValueError, match="bad prompt"):
        bad.result(timeout=10)
    assert good.result(timeout=10).prompt == "ok"
    driver.close()
    with pytest.raises(BackendError, match="is closed"):
        driver.submit("late", None)


def test_labelling_on_engine_sides_keeps_many_samples_in_flight_and_says_latencies_are_batched(tmp_path, monkeypatch):
    import types

    from routedvlm.data.labelling.config import LabelConfig, every_side
    from routedvlm.data.labelling.metadata import scale_info
    from routedvlm.data.labelling.runner import BATCHED, WALL_CLOCK, latency_source

    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))  # 'vllm:' specs are accepted where vLLM is
    cfg = LabelConfig(small="vllm:s", large="vllm:l", dataset="d", out=str(tmp_path / "o.parquet"))
    assert cfg.concurrency == 32 and latency_source(cfg, every_side(cfg, "batching")) == BATCHED
    assert scale_info(cfg)["requests_in_flight"] == 32
    one = LabelConfig(small="vllm:s", large="vllm:l", dataset="d", out=str(tmp_path / "o.parquet"), concurrency=1)
    assert latency_source(one, every_side(one, "batching")) == WALL_CLOCK
    mixed = LabelConfig(small="vllm:s", large="some/folder", dataset="d", out=str(tmp_path / "o.parquet"))
    assert mixed.concurrency == 1  # a local side serves one sample at a time


def test_many_threads_calling_first_start_one_engine(pair, monkeypatch):
    import time

    from routedvlm.inference.sides.vllm.side import VLLMEngine

    side, started = VLLMEngine(pair[1]), []

    def start():
        started.append(1)
        time.sleep(0.2)  # a slow start: the other threads arrive meanwhile (the count, not the time, is asserted)
        return object()

    monkeypatch.setattr(side, "_start", start)
    threads = [threading.Thread(target=lambda: side.driver) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(started) == 1


class CachingDriver:
    """A fake engine driver with vLLM's prefix-cache accounting: per `cache_salt`, full blocks of prompt token ids
    are cached; a request reuses its longest cached run of full blocks (never its last token). The output is a
    deterministic function of the prompt (a word per requested token), so both runs answer alike."""

    def __init__(self, side, block: int):
        self.side, self.block, self.blocks = side, block, {}

    def submit(self, prompt, params):
        from concurrent.futures import Future

        ids = self.side.tokenizer(prompt["prompt"]).input_ids
        known, b = self.blocks.setdefault(prompt.get("cache_salt"), set()), self.block
        cached = 0
        while cached + b <= len(ids) - 1 and tuple(ids[:cached + b]) in known:
            cached += b
        known.update(tuple(ids[:j]) for j in range(b, len(ids) + 1, b))
        words = self.side.tokenizer(" seven" * params.max_tokens, add_special_tokens=False).input_ids
        out = SimpleNamespace(outputs=[SimpleNamespace(token_ids=words[:params.max_tokens], logprobs=None)],
                              prompt_token_ids=ids, num_cached_tokens=cached, metrics=None, finished=True)
        fut = Future()
        fut.set_result(out)
        return fut


@pytest.mark.parametrize("overlap", [False, True])
def test_priced_labelling_sends_only_the_works_requests_with_the_same_answers_and_token_counts(pair, overlap):
    """--cost (`priced` sides): no cold repeats and no seeded namespaces, yet the same answers and the same reused
    and prefilled token counts (what the cost model prices) as the default run, escalations reusing the prefix."""
    from PIL import Image

    from routedvlm.inference import CollaborativePipeline
    from routedvlm.inference.sides.vllm.side import VLLMEngine

    small, large = (VLLMEngine(p, engine_args={"block_size": 4}) for p in pair)
    for side in (small, large):
        side.params = lambda max_tokens, min_tokens=0: SimpleNamespace(max_tokens=int(max_tokens))
    pipe = CollaborativePipeline(small, large, k_grid=(4, 8, 16), max_direct_tokens=8, max_reason_tokens=48)
    pipe.overlap_calls = overlap
    image = Image.new("RGB", (32, 32), "white")

    def label(priced: bool):
        logs = ([], [])
        for side, log in zip((small, large), logs):
            side._driver, side.request_log = CachingDriver(side, 4), log
            side.measure_cold, side.priced = not priced, priced
        results = pipe.run_many(image, "How many red bars?")
        answers = {s: r.answer for s, r in results.items()}
        tokens = {s: [(t["stage"], t["prefill_tokens"], t["cached_tokens"]) for t in r.trace] for s, r in results.items()}
        return answers, tokens, [stage for log in logs for stage, *_ in log]

    answers, tokens, sent = label(False)
    p_answers, p_tokens, p_sent = label(True)
    transfers = [s for s in answers if s.startswith("transfer_")]
    assert len(transfers) == 4
    assert sent.count("large_transfer_cold") == 4 and sent.count("large_prefix_seed") == 3
    assert sorted(p_sent) == sorted(s for s in sent if s not in ("large_transfer_cold", "large_prefix_seed"))
    assert len(p_sent) == len(sent) - 7
    assert p_answers == answers and p_tokens == tokens
    reused = [c for t in p_tokens.values() for stage, _, c in t if stage == "large_transfer"]
    assert reused and all(c > 0 for c in reused)


class TokenLLM:
    """enqueue/step like vllm.LLM with its default cumulative outputs: one more token per step, finished at `n`."""

    def __init__(self, n=5):
        self.n, self.steps, self.running, self.aborted = n, 0, {}, []
        self.llm_engine = self

    def enqueue(self, prompts, params, use_tqdm=False):
        for i, _ in enumerate(prompts):
            self.running[str(i)] = []
        return [f"{i}-abcdefgh" for i in range(len(prompts))]

    def step(self):
        self.steps += 1
        outs = []
        for rid, ids in list(self.running.items()):
            ids.append(100 + len(ids))
            done = len(ids) == self.n
            outs.append(SimpleNamespace(request_id=rid, finished=done, outputs=[SimpleNamespace(token_ids=list(ids))]))
            if done:
                del self.running[rid]
        return outs

    def abort_request(self, ids):
        self.aborted.extend(ids)
        for rid in ids:
            self.running.pop(rid.rsplit("-", 1)[0], None)


def test_driver_streams_each_steps_new_tokens_before_the_request_finishes():
    from routedvlm.inference.sides.vllm.driver import EngineDriver

    llm = TokenLLM(n=5)
    driver = EngineDriver(llm, name="fake")
    seen = []
    out = driver.submit("p", None, on_tokens=lambda new: seen.append((llm.steps, new))).result(timeout=10)
    driver.close()
    assert [new for _, new in seen] == [[100], [101], [102], [103], [104]]  # one delta per decoded token, in order
    assert seen[0][0] == 1 < llm.n  # the first token went out after the first step, four steps before the last
    assert list(out.outputs[0].token_ids) == [100, 101, 102, 103, 104]


def test_a_stream_whose_client_left_aborts_its_engine_request():
    from routedvlm.inference.sides.vllm.driver import EngineDriver
    from routedvlm.inference.streaming import StreamCancelled

    llm = TokenLLM(n=50)
    driver = EngineDriver(llm, name="fake")

    def gone(new):
        if new[0] >= 102:
            raise StreamCancelled("the client of this streamed request disconnected")

    with pytest.raises(StreamCancelled):
        driver.submit("p", None, on_tokens=gone).result(timeout=10)
    assert llm.aborted == ["0-abcdefgh"] and llm.steps < 50
    driver.close()
