"""A router folder with a damaged model file never takes RoutedVLM or `routedvlm serve` down: the load fails
cleanly (RouterLoadError, before LightGBM parses anything) and the fallback answers."""
import socket
import subprocess
import sys
import time

import pytest
from damage_helpers import LIGHTGBM, damaged_copy
from routed_helpers import save_prompt_router
from serve_helpers import stop_process

MODEL = "model_small_direct.txt"
PIPE_FLAGS = ["--min-new-tokens", "4", "--max-direct-tokens", "6", "--max-reason-tokens", "40", "--min-reason-tokens", "24"]


@pytest.fixture(scope="module")
def router_dir(tmp_path_factory):
    return save_prompt_router(tmp_path_factory.mktemp("damaged") / "router")


@pytest.mark.parametrize("legacy", [False, True], ids=["format-2", "format-1"])
def test_routed_vlm_answers_with_the_fallback_for_every_kind_of_damage(tiny_pair, make_pipeline, images, router_dir,
                                                                        tmp_path, legacy):
    from routedvlm.inference.routed import RoutedVLM

    pipe = make_pipeline(*tiny_pair)
    kinds = list(LIGHTGBM) if not legacy else ["truncated", "nan_thresholds", "child_cycle"]
    for kind in kinds:
        folder = damaged_copy(router_dir, tmp_path / kind, MODEL, LIGHTGBM[kind], legacy=legacy)
        routed = RoutedVLM(pipe, str(folder), fallback="large_direct")
        assert routed.router is None and routed.router_error.startswith("RouterLoadError: "), kind
        assert ("records no sha256" if legacy else "has sha256") in routed.router_error
        out = routed(image=images["wide"], question="Color?")
        assert out.strategy == "large_direct" and out.decision["fallback"] is True and out.text


def _user(image, text):
    import base64
    import io

    buf = io.BytesIO()
    image.save(buf, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": text}]}]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_serve_starts_and_answers_with_a_router_that_crashes_lightgbm(tiny_pair, router_dir, images, tmp_path):
    """Format 1 (no digests): the truncated file aborts LightGBM's parser in the check process, not in the server."""
    import httpx

    folder = damaged_copy(router_dir, tmp_path / "truncated", MODEL, LIGHTGBM["truncated"], legacy=True)
    port, log_path = _free_port(), tmp_path / "server.log"
    cmd = [sys.executable, "-m", "routedvlm.cli", "serve", "--small", tiny_pair[0].name, "--large",
           tiny_pair[1].name, "--router", str(folder), "--fallback", "large_direct", "--port", str(port),
           "--log-level", "warning", *PIPE_FLAGS]
    url = f"http://127.0.0.1:{port}"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 180
            while True:
                assert proc.poll() is None, f"server exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}"
                try:  # serve listens at once and loads in the background: /ready is 200 once loaded
                    if httpx.get(f"{url}/ready", timeout=5).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "server did not start within 180 s"
                time.sleep(0.25)
            r = httpx.post(f"{url}/v1/chat/completions", timeout=120,
                           json={"model": "routedvlm", "messages": _user(images["wide"], "Color?")})
        finally:
            stop_process(proc)
    assert r.status_code == 200 and r.headers["x-routedvlm-strategy"] == "large_direct"
    assert r.json()["routedvlm"]["fallback"] is True
    assert "crashed LightGBM's parser" in log_path.read_text()
