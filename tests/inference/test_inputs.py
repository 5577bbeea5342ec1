"""Python input: `messages` with OpenAI parts and transformers parts alike (PIL, path, file://, data: and
http(s) URLs), text-only chats through every strategy, device 'auto' and the thread setting."""
import base64
import functools
import http.server
import io
import threading

import pytest

Q = "How many boxes?"


def _png(image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def pipe(tiny_pair, make_pipeline):
    return make_pipeline(*tiny_pair)


@pytest.fixture(scope="module")
def image_server(tmp_path_factory, images):
    """A loopback HTTP server serving the square image as /square.png."""
    root = tmp_path_factory.mktemp("www")
    (root / "square.png").write_bytes(_png(images["square"]))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a, **k: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _parts(images, tmp_path, url):
    path = tmp_path / "square.png"
    path.write_bytes(_png(images["square"]))
    data = "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()
    return {
        "transformers PIL": {"type": "image", "image": images["square"]},
        "transformers path": {"type": "image", "image": str(path)},
        "transformers url (data)": {"type": "image", "url": data},
        "transformers url (path)": {"type": "image", "url": str(path)},
        "transformers url (file://)": {"type": "image", "url": f"file://{path}"},
        "transformers url (http)": {"type": "image", "url": f"{url}/square.png"},
        "transformers path key": {"type": "image", "path": str(path)},
        "openai data url": {"type": "image_url", "image_url": {"url": data}},
        "openai path": {"type": "image_url", "image_url": {"url": str(path)}},
        "openai bare string": {"type": "image_url", "image_url": data},
    }


def test_every_image_part_form_gives_the_same_answer(pipe, images, tmp_path, image_server):
    ref = pipe.run(images["square"], Q, "large_direct").answer
    for name, part in _parts(images, tmp_path, image_server).items():
        msgs = [{"role": "user", "content": [part, {"type": "text", "text": Q}]}]
        assert pipe.run(messages=msgs, strategy="large_direct").answer == ref, name


def test_routed_vlm_takes_openai_parts_and_history(pipe, images, tmp_path, image_server):
    from routedvlm.inference.routed import RoutedVLM

    vlm = RoutedVLM(pipe, "large_direct")
    part = _parts(images, tmp_path, image_server)["openai data url"]
    history = [{"role": "system", "content": [{"type": "text", "text": "Be brief."}]}]
    out = vlm.generate(messages=[*history, {"role": "user", "content": [part, {"type": "text", "text": Q}]}])
    ref = vlm.generate(messages=[*history, {"role": "user", "content": [{"type": "image", "image": images["square"]},
                                                                       {"type": "text", "text": Q}]}])
    assert out.text == ref.text and out.strategy == "large_direct"


@pytest.mark.parametrize("strategy", ["small_direct", "large_direct", "small_reason", "large_reason", "transfer_8",
                                      "transfer_all"])
def test_text_only_requests_run_every_strategy(pipe, strategy):
    res = pipe.run(question=Q, strategy=strategy)
    same = pipe.run(messages=[{"role": "user", "content": Q}], strategy=strategy)
    assert res.answer == same.answer and all(r["vision_ms"] == 0 for r in res.trace)


def test_text_only_escalation_equals_the_one_stage_transfer(pipe):
    first = pipe.run(question=Q, strategy="large_direct")
    assert pipe.escalate(first, 8).answer == pipe.run(question=Q, strategy="transfer_8").answer


def test_text_only_features_say_there_is_no_image(pipe):
    from routed_helpers import every_feature_router

    from routedvlm.inference.routed import RoutedVLM

    out = RoutedVLM(pipe, every_feature_router("transfer_8"))(question=Q)
    feats = out.decision["features"]
    assert not out.fallback and feats["feat__prompt__image_count"] == 0 and feats["feat__prompt__image_megapixels"] == 0
    assert feats["feat__prompt__image_aspect"] == 0 and feats["feat__prompt__question_chars"] == len(Q)


@pytest.mark.parametrize("part, match", [
    ({"type": "image"}, r"^An image part must carry its image"),
    ({"type": "image_url", "image_url": {"url": "data:image/png;base64,!!"}}, r"^An image data URL holds invalid base64"),
    ({"type": "image", "url": "data:image/png;base64,aGVsbG8="}, r"^The image data is not a readable image"),
    ({"type": "audio"}, r"^A message part's `type` must be one of 'image', 'image_url' or 'text'"),
])
def test_bad_parts_are_clear_errors(pipe, part, match):
    from routedvlm.errors import ImageLoadError, InputError

    with pytest.raises((InputError, ImageLoadError), match=match):
        pipe.run(messages=[{"role": "user", "content": [part, {"type": "text", "text": Q}]}], strategy="large_direct")


def test_two_images_and_an_unreachable_url_are_clear_errors(pipe, images, image_server):
    from routedvlm.errors import ImageLoadError, InputError

    two = [{"type": "image", "image": images["square"]}] * 2
    with pytest.raises(InputError, match=r"^The last user message may hold at most one image part. Got 2"):
        pipe.run(messages=[{"role": "user", "content": [*two, {"type": "text", "text": Q}]}])
    with pytest.raises(ImageLoadError, match=r"^The image URL .*/missing.png' cannot be fetched \(HTTPStatusError"):
        pipe.run(messages=[{"role": "user", "content": [{"type": "image", "url": f"{image_server}/missing.png"},
                                                       {"type": "text", "text": Q}]}])


def test_device_auto_is_cuda_when_present(monkeypatch):
    import torch

    from routedvlm.inference.vlm import resolve_device

    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu") and resolve_device("cpu") == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == "cuda" and resolve_device(None) == "cuda"


def test_default_device_is_auto_everywhere():
    import inspect

    from routedvlm.data.labelling.config import LabelConfig
    from routedvlm.inference.profiling.profiler import ProfileSettings
    from routedvlm.inference.serving.cli import ServeConfig
    from routedvlm.inference.vlm import VLM

    assert inspect.signature(VLM.from_pretrained).parameters["device"].default == "auto"
    assert ServeConfig.device == LabelConfig.device == "auto"
    assert ProfileSettings().device in ("cpu", "cuda")  # 'auto', resolved


def test_set_threads():
    import torch

    from routedvlm.inference.vlm import set_threads

    before = torch.get_num_threads()
    try:
        assert set_threads(1) == 1 == torch.get_num_threads() and set_threads(0) == 1
    finally:
        torch.set_num_threads(before)
