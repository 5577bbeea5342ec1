"""RoutedVLM.stream: the final answer streams token by token and concatenates to generate()'s answer for every
route; max_tokens, cancellation, and the AnswerSink's hold-back rules on a worked example."""
import pytest
from routed_helpers import every_feature_router

Q = "How many boxes?"
ROUTERS = ["small_direct", "large_direct", "small_reason", "large_reason", "transfer_8", "transfer_all",
           "mutual-verification:8"]


@pytest.fixture(scope="module")
def pipe(tiny_pair, make_pipeline):
    return make_pipeline(*tiny_pair)


@pytest.fixture(scope="module")
def routed(pipe):
    from routedvlm.inference.routed import RoutedVLM

    cache = {}

    def get(router):
        key = router if isinstance(router, str) else id(router)
        if key not in cache:
            cache[key] = RoutedVLM(pipe, router)
        return cache[key]

    return get


@pytest.mark.parametrize("router", ROUTERS)
@pytest.mark.parametrize("image", ["square", None])
def test_streamed_text_equals_generate(routed, images, router, image):
    vlm, img = routed(router), images[image] if image else None
    stream = vlm.stream(image=img, question=Q)
    text = "".join(stream)
    ref = vlm.generate(image=img, question=Q)
    assert text == ref.text == stream.output.text and stream.route["strategy"] == ref.strategy
    assert stream.output.usage == ref.usage and stream.output.finish_reason == ref.finish_reason


def test_escalation_streams_too(routed, images):
    vlm = routed(every_feature_router("transfer_8"))
    stream = vlm.stream(image=images["wide"], question=Q)
    assert "".join(stream) == vlm.generate(image=images["wide"], question=Q).text
    assert stream.output.trace[-1]["stage"] == "escalate"


@pytest.mark.parametrize("router", ["small_direct", "transfer_8", "small_reason"])
def test_every_decoded_token_is_offered_to_the_sink(routed, images, router, monkeypatch):
    """Streaming follows decoding: the sink sees the answer once per generated token of the final answer call(s),
    plus once at the end."""
    from routedvlm.inference import streaming

    offers = []
    real = streaming.AnswerSink.offer
    monkeypatch.setattr(streaming.AnswerSink, "offer", lambda self, text: (offers.append(text), real(self, text)))
    stream = routed(router).stream(image=images["tall"], question=Q)
    "".join(stream)
    res = stream.output.result
    calls = [res.generation] if res.generation is res.reasoning_generation or not router.endswith("_reason") \
        else [res.reasoning_generation, res.generation]
    assert len(offers) == sum(g.output_tokens for g in calls) + 1


def test_max_tokens_caps_the_stream_and_the_answer(routed, images):
    vlm = routed("transfer_8")
    stream = vlm.stream(image=images["square"], question=Q, max_tokens=2)
    text = "".join(stream)
    ref = vlm.generate(image=images["square"], question=Q, max_tokens=2)
    full = vlm.generate(image=images["square"], question=Q)
    assert text == ref.text and ref.usage["completion_tokens"] == 2 and ref.finish_reason == "length"
    assert ref.text == vlm.pipeline.large.clean_answer(full.result.generation.token_ids[:2])
    assert ref.usage["prompt_tokens"] == full.usage["prompt_tokens"]


def test_cancelled_stream_stops_and_frees_the_models(routed, images):
    from routedvlm.inference.streaming import StreamCancelled

    vlm = routed("large_direct")
    stream = vlm.stream(image=images["square"], question=Q)
    events = []

    def put(event):
        events.append(event)
        if event[0] == "route":
            stream.cancel()

    stream.run(put)
    assert [e[0] for e in events] == ["route", "error"] and isinstance(events[1][1], StreamCancelled)
    assert vlm.generate(image=images["square"], question=Q).strategy == "large_direct"  # the lock was released


def test_bad_max_tokens_is_an_input_error(routed, images):
    from routedvlm.errors import InputError

    with pytest.raises(InputError, match=r"^The `max_tokens` parameter must be a positive integer or None"):
        routed("large_direct").stream(image=images["square"], question=Q, max_tokens=0)


def test_stable_text_holds_back_what_a_later_token_can_change():
    """'Yes <' may be the start of '<think>', 'caf' + U+FFFD the first byte of 'é': both tails wait for the next token."""
    from routedvlm.inference.streaming import _stable

    markers = ["<think>", "</think>", "Answer:"]
    assert _stable("Yes <", markers) == "Yes " and _stable("Yes </th", markers) == "Yes "
    assert _stable("Yes <3", markers) == "Yes <3" and _stable("so Answ", markers) == "so "
    assert _stable("caf\ufffd", markers) == "caf" and _stable("", markers) == ""


def test_answer_sink_sends_what_is_new_and_stops_when_text_is_rewritten(caplog):
    from routedvlm.inference.streaming import AnswerSink

    sent = []
    sink = AnswerSink(sent.append)
    for text in ["Y", "Yes", "Yes", "Yes ", "Yes <3"]:
        sink.offer(text)
    assert sent == ["Y", "es", " ", "<3"]
    sink.offer("No")  # a later token rewrote the answer (a stray </think>): no more deltas, and a warning
    sink.offer("No more")
    assert sink.diverged and sent == ["Y", "es", " ", "<3"] and "rewritten by a later token" in caplog.text
