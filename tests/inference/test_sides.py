"""The `ModelSide` contract, run over every side implementation: the local transformers side (`VLM`, tiny models) and
the OpenAI-compatible HTTP side (`OpenAIVLM`) against the `routedvlm serve` stand-in server of the same tiny pair.
Greedy answers of the HTTP side equal the local model's (the server runs it), as test_server.py already checks for
whole strategies."""
import pytest
from serve_helpers import KEY

from routedvlm.errors import ModeUnavailableError
from routedvlm.inference.inputs import make_request
from routedvlm.inference.pipeline_parts import PipelineConfig
from routedvlm.inference.sides import ModelSide, load_side
from routedvlm.inference.sides.kinds import KINDS

Q = "How many boxes?"
CFG = PipelineConfig(min_new_tokens=4, max_direct_tokens=6, max_reason_tokens=40, min_reason_tokens=24)
RECORD_KEYS = {"stage", "model", "checkpoint", "mode", "vision_ms", "prefill_ms", "prefill_tokens", "cached_tokens",
               "decode_ms", "decode_tokens"}


class TinyEngine:
    """A stand-in for `vllm.LLM` that decodes greedily with the tiny transformers model of the same folder, so the
    engine side's contract runs here without vLLM: `enqueue`/`step` as the engine driver calls them, outputs shaped
    like vLLM's `RequestOutput` (no prefix cache: nothing is reported cached)."""

    def __init__(self, model, **engine_args):
        from routedvlm.inference import VLM

        self.vlm, self.llm_engine, self.finished, self.n = VLM.from_pretrained(model, device="cpu"), self, [], 0

    def enqueue(self, prompts, params, use_tqdm=False):
        from types import SimpleNamespace

        from routedvlm.inference.sides.local.generation import timed_generate

        ids = []
        for prompt, p in zip(prompts, params):
            inputs = self.vlm.encode((prompt.get("multi_modal_data") or {}).get("image"), prompt["prompt"])
            gen = timed_generate(self.vlm.model, inputs, max_new_tokens=p.max_tokens, min_new_tokens=p.min_tokens)
            self.finished.append(SimpleNamespace(
                request_id=str(self.n), finished=True, prompt_token_ids=inputs["input_ids"][0].tolist(),
                num_cached_tokens=0, metrics=None, outputs=[SimpleNamespace(token_ids=gen.token_ids, logprobs=None)]))
            ids.append(f"{self.n}-tinyllm0")  # vLLM appends 8 characters to the id a RequestOutput carries
            self.n += 1
        return ids

    def step(self):
        done, self.finished = self.finished, []
        return done


def _engine_pair(request, tiny_pair):
    """The tiny pair as in-process engine sides over `TinyEngine` (a fake `vllm` module while the fixture lives)."""
    import sys
    from types import ModuleType, SimpleNamespace

    fake = ModuleType("vllm")
    fake.LLM, fake.SamplingParams = TinyEngine, SimpleNamespace
    had = sys.modules.get("vllm", False)
    sys.modules["vllm"] = fake
    pair = tuple(load_side(f"vllm:{side.name}") for side in tiny_pair)
    for side in pair:
        side.require_prefix_cache = False  # the stand-in keeps no prefix cache to measure reuse with
        side.start()

    def undo():
        for side in pair:
            side.close()
        if had is False:
            sys.modules.pop("vllm", None)
        else:
            sys.modules["vllm"] = had

    request.addfinalizer(undo)
    return pair


@pytest.fixture(scope="module", params=[kind.name for kind in KINDS])
def sides(request, tiny_pair):
    """(kind, the (small, large) sides of that kind, the local pair they must agree with): every kind of the spec
    table, the real one where it runs here, else a stand-in."""
    if request.param == "local":
        return "local", tiny_pair, tiny_pair
    if request.param == "vllm":
        return "vllm", _engine_pair(request, tiny_pair), tiny_pair
    assert request.param == "http", f"the side contract has no fixture for the kind {request.param!r}: add one"
    served = request.getfixturevalue("served")
    url = f"{served['url']}/v1"  # routedvlm serve keeps no prefix cache across requests: no reuse to require
    from routedvlm.inference import VLM

    pair = tuple(VLM.from_openai(url, name, api_key=KEY, timeout=120, require_prefix_cache=False)
                 for name in ("small", "large"))
    return "http", pair, tiny_pair


def test_every_side_is_a_model_side_with_its_capabilities(sides):
    from routedvlm.inference.sides.kinds import side_kind

    kind, (small, large), _ = sides
    assert isinstance(small, ModelSide) and isinstance(large, ModelSide)
    declared = side_kind(small)  # what the spec table declares for the side's kind, the side itself does
    assert declared.name == small.kind and small.stateful is declared.stateful
    assert small.shares_prefixes is declared.stateful and (small.prompt_cache("small") is not None) is declared.stateful
    assert small.stateful is (kind == "local")  # a server or an engine keeps no state of ours between calls
    if kind != "vllm":  # an engine extracts hidden states from some architectures only (tests/inference/test_vllm_hidden.py)
        assert large.returns_hidden_states is declared.hidden_states is (kind == "local")
    assert small.device != large.device or kind == "local"  # two servers' (engines') models run concurrently


def test_direct_answer_equals_the_local_models_and_reads_back(sides, images):
    kind, (small, _), (ref, _) = sides
    req = make_request(images["wide"], Q, None)
    gen, answer, records = small.run_direct("small", req, CFG)
    ref_gen, ref_answer, _ = ref.run_direct("small", make_request(images["wide"], Q, None), CFG)
    assert answer == ref_answer and gen.output_tokens == ref_gen.output_tokens
    assert isinstance(records, list) and RECORD_KEYS <= set(records[-1]) and records[-1]["stage"] == "small_direct"
    read_back = small.answer_text(gen.token_ids, "direct")
    # an HTTP side reads the server's token strings, which keep special tokens its message content leaves out
    assert read_back == answer if kind == "local" else read_back.endswith(answer)
    assert small.hit_limit(gen, CFG.max_direct_tokens) is ref.hit_limit(ref_gen, CFG.max_direct_tokens)


def test_reasoning_run_and_its_answer(sides, images):
    kind, (small, _), (ref, _) = sides
    run = small.run_reasoning("small", make_request(images["square"], Q, None), CFG, 16)
    ref_run = ref.run_reasoning("small", make_request(images["square"], Q, None), CFG, 16)
    assert run.side == "small" and run.records[-1]["stage"] == "small_reason"
    assert len(run.reasoning_ids) == len(ref_run.reasoning_ids) and run.answer == ref_run.answer
    done = run.vlm.finish_answer(run, CFG) if run.answer is None else run
    assert isinstance(done.answer, str) and done.records[-1]["stage"].startswith("small_reason")
    assert small.reasoning_token_count(run.gen.token_ids) == ref.reasoning_token_count(ref_run.gen.token_ids)


def test_prefix_continuation_answers_like_a_cold_call(sides, images):
    """`prefix` keeps the image+question prefix; continuing it gives the cold call's answer."""
    kind, (_, large), _ = sides
    req = make_request(images["tall"], Q, None)
    lp = large.prefix("large", req, CFG)
    _, warm, rec = lp.answer(lp.direct_text, "large_direct")
    _, cold, _ = large.answer_cold("large", make_request(images["tall"], Q, None), Q, "large_transfer", CFG)
    assert warm == cold and rec["stage"] == "large_direct" and lp.prefix_record["stage"] == "large_prefix"
    kept = lp.transfer_text("one two")
    assert "one two" in (kept if kind == "http" else large.tokenizer.decode(large.text_ids(kept)))


def test_metadata_description_and_limits(sides):
    kind, (small, _), _ = sides
    info = small.describe()
    assert {"name", "dtype", "device", "weights"} <= set(info) and info["name"] == small.name
    if kind != "http":  # weights in this process (the engine side reads the same checkpoint folder)
        assert small.context_length() > 0 and small.eos_ids() and info["weights"] == small.name
    else:
        assert small.context_length() is None and small.eos_ids() == [] and info["device"] == "remote"
        assert info["server"] == small.client.base_url and info["model_id"] == "small"


def test_plain_completion_is_offered_by_every_side(sides, images):
    kind, (small, _), _ = sides
    req = make_request(images["square"], Q, None)
    seen = []
    gen, answer, reasoning = small.complete(req, "direct", max_tokens=6, min_tokens=4, check_context=seen.append)
    ref_gen, ref_answer, _ = small.run_direct("small", make_request(images["square"], Q, None), CFG)
    assert answer == ref_answer and reasoning is None
    assert seen == ([gen.prefill_tokens] if kind == "local" else [])  # an engine or a server checks its own context


def test_load_side_dispatches_on_the_spec(tiny_pair):
    small = tiny_pair[0]
    assert load_side(small) is small  # a side object as is
    from routedvlm.inference.sides.http.side import OpenAIVLM

    remote = load_side("http://127.0.0.1:9/v1#m")
    assert isinstance(remote, OpenAIVLM) and remote.model_id == "m"


# ----- a third implementation fits without new branches -------------------------------------------------------------
class WordSide(ModelSide):
    """A side written against the interface alone (no torch, no HTTP): tokens are words, answers are canned.
    It reasons "step1 step2 ..." and answers with the number of reasoning words it was shown."""

    stateful = False

    def __init__(self, name, reasoning_words=12):
        from routedvlm.inference.prompts import DEFAULT_PROMPTS

        self.name, self.style, self.reasoner, self.prompts, self.reason_prompt = name, "hybrid", None, DEFAULT_PROMPTS, True
        self.words = [f"step{i}" for i in range(1, reasoning_words + 1)]

    device = "words"

    def describe(self):
        return {"name": self.name, "dtype": None, "device": "words", "weights": None}

    def _gen(self, tokens):
        from routedvlm.inference.sides.results import Generation

        return Generation(list(tokens), [-0.5] * len(tokens), 0.1, [float(i) for i in range(len(tokens))], 0.0, 1.0,
                          float(len(tokens)), 8, 0)

    def _answer(self, side, stage, question, cfg):
        from routedvlm.inference.sides.results import record

        shown = sum(w.startswith("step") for w in question.split())
        gen = self._gen([f"{self.name}:{shown}"][: cfg.max_direct_tokens])
        return gen, gen.token_ids[0], record(stage, side, self, self.mode_name("direct"), gen)

    def run_direct(self, side, request, cfg, *, cache=None, upcoming=(), inputs=None):
        gen, answer, rec = self._answer(side, f"{side}_direct", request.question, cfg)
        return gen, answer, [rec]

    def run_reasoning(self, side, request, cfg, max_tokens, *, cache=None, upcoming=(), inputs=None):
        from routedvlm.inference.sides.results import ReasoningRun, record

        words = self.words[:max_tokens]
        gen = self._gen(words)
        rec = record(f"{side}_reason", side, self, self.mode_name("reason"), gen, reasoning_tokens=len(words))
        return ReasoningRun(self, side, gen, None, list(range(len(words))), " ".join(words), None, [rec])

    def finish_answer(self, run, cfg):
        run.answer_gen, run.answer, rec = self._answer(run.side, f"{run.side}_reason_answer", run.reasoning_text, cfg)
        run.records.append(rec)
        return run

    def answer_cold(self, alias, request, question, stage, cfg):
        return self._answer(alias, stage, question, cfg)

    def prefix(self, alias, request, cfg):
        side = self

        class Prefix:
            direct_text, prefix_record = request.question, {"stage": f"{alias}_prefix", "model": alias, "vision_ms": 0.0,
                                                            "prefill_ms": 0.0, "decode_ms": 0.0}

            def __init__(self):
                self.request = request

            def transfer_text(self, reasoning):
                return side.prompts.transfer_question(request.question, reasoning)

            def answer(self, text, stage, restore_rope=True):
                return side._answer(alias, stage, text, cfg)

            def transfer(self, text):
                gen, answer, rec = self.answer(text, f"{alias}_transfer")
                return gen, answer, [dict(self.prefix_record), rec]

            def attention_scores(self, reasoning):
                raise ModeUnavailableError("no attention")

        return Prefix()

    def complete(self, request, mode, *, max_tokens, min_tokens=0, partial=None, check_context=None):
        gen, answer, _ = self._answer("small", "plain", request.question, PipelineConfig(max_direct_tokens=max_tokens))
        return gen, answer, None

    def decode(self, ids):
        return " ".join(self.words[i] for i in ids)

    def answer_text(self, ids, kind):
        return " ".join(ids)

    def reasoning_token_count(self, ids):
        return len(ids)


def test_a_new_side_runs_every_strategy_through_the_pipeline():
    """Strategies, run_many, escalate and serve's plain call work on a side that only implements the interface:
    a transfer of K kept words answers K, whether run alone, shared in run_many or escalated."""
    from routedvlm.inference import CollaborativePipeline

    pipe = CollaborativePipeline(WordSide("s"), WordSide("l"), k_grid=[4, 8], max_reason_tokens=10)
    alone = {s: pipe.run(None, "How many?", s) for s in ("small_direct", "large_direct", "small_reason", "large_reason",
                                                          "transfer_4", "transfer_all")}
    assert {s: r.answer for s, r in alone.items()} == {
        "small_direct": "s:0", "large_direct": "l:0", "small_reason": "s:10", "large_reason": "l:10",
        "transfer_4": "l:4", "transfer_all": "l:10"}
    many = pipe.run_many(None, "How many?", list(alone))
    assert {s: r.answer for s, r in many.items()} == {s: r.answer for s, r in alone.items()}
    assert pipe.escalate(alone["large_direct"], 8).answer == "l:8"
    plain = pipe.complete("small", make_request(None, "How many?", None), thinking=False)
    assert plain.answer == "s:0" and plain.finish_reason == "stop" and plain.trace[0]["stage"] == "small_direct"


class MeetingSide(WordSide):
    """A WordSide whose calls of the first stage wait until all four are in flight (a Barrier): only a run that sends
    a sample's independent calls at once gets past it."""

    def __init__(self, name, barrier):
        super().__init__(name)
        self.barrier = barrier

    def run_direct(self, side, request, cfg, **kw):
        self.barrier.wait()
        return super().run_direct(side, request, cfg, **kw)

    def run_reasoning(self, side, request, cfg, max_tokens, **kw):
        self.barrier.wait()
        return super().run_reasoning(side, request, cfg, max_tokens, **kw)

    def prefix(self, alias, request, cfg):
        prefix, barrier = super().prefix(alias, request, cfg), self.barrier
        answer = prefix.answer

        def meeting_answer(text, stage, restore_rope=True):
            if stage == "large_direct":
                barrier.wait()
            return answer(text, stage, restore_rope)

        prefix.answer = meeting_answer
        return prefix


def test_overlapped_run_many_sends_a_samples_independent_calls_at_once_with_the_same_results():
    import threading

    from routedvlm.inference import CollaborativePipeline

    strategies = ["small_direct", "large_direct", "small_reason", "large_reason", "transfer_4", "transfer_8",
                  "transfer_all"]
    serial = CollaborativePipeline(WordSide("s"), WordSide("l"), k_grid=[4, 8], max_reason_tokens=10)
    want = serial.run_many(None, "How many?", strategies)
    barrier = threading.Barrier(4, timeout=30)
    pipe = CollaborativePipeline(MeetingSide("s", barrier), MeetingSide("l", barrier), k_grid=[4, 8],
                                 max_reason_tokens=10)
    pipe.overlap_calls = True  # the labeller sets it when many samples are in flight on sides that batch
    got = pipe.run_many(None, "How many?", strategies)
    assert {s: r.answer for s, r in got.items()} == {s: r.answer for s, r in want.items()}
    assert {s: [r["stage"] for r in res.trace] for s, res in got.items()} == \
        {s: [r["stage"] for r in res.trace] for s, res in want.items()}


class SlowLargeReason(WordSide):
    """A WordSide whose own reasoning as the large model ends only once a transfer has been sent to it."""

    def __init__(self, name, sent):
        super().__init__(name)
        self.sent = sent

    def run_reasoning(self, side, request, cfg, max_tokens, **kw):
        if side == "large" and not self.sent.wait(timeout=10):
            raise TimeoutError("large_reason ended before any transfer was sent: the transfers waited for it")
        return super().run_reasoning(side, request, cfg, max_tokens, **kw)

    def prefix(self, alias, request, cfg):
        prefix, sent = super().prefix(alias, request, cfg), self.sent
        transfer = prefix.transfer

        def sending(text):
            sent.set()
            return transfer(text)

        prefix.transfer = sending
        return prefix


def test_overlapped_transfers_do_not_wait_for_the_targets_own_reasoning():
    """Regression: the transfers went out only once every first-stage call of the sample had ended, the large model's
    own (longest) reasoning included, though they need only the source's reasoning and the target's direct answer;
    on engines that left the batch half empty while the large model reasoned."""
    import threading

    from routedvlm.inference import CollaborativePipeline

    strategies = ["small_direct", "large_direct", "small_reason", "large_reason", "transfer_4", "transfer_all"]
    want = CollaborativePipeline(WordSide("s"), WordSide("l"), k_grid=[4], max_reason_tokens=10).run_many(
        None, "How many?", strategies)
    sent = threading.Event()
    pipe = CollaborativePipeline(WordSide("s"), SlowLargeReason("l", sent), k_grid=[4], max_reason_tokens=10)
    pipe.overlap_calls = True
    got = pipe.run_many(None, "How many?", strategies)
    assert {s: r.answer for s, r in got.items()} == {s: r.answer for s, r in want.items()}
    assert {s: [r["stage"] for r in res.trace] for s, res in got.items()} == \
        {s: [r["stage"] for r in res.trace] for s, res in want.items()}
