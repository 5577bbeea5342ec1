"""Session-scoped tiny VLMs for the inference tests (built offline from configs with random weights)."""
import pytest


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("tiny-vlms")


@pytest.fixture(scope="session")
def tiny_pair(tiny_dir):
    """(small, large) VLMs of the qwen3_vl family with the hybrid-thinking template."""
    from routedvlm.inference import VLM, build_tiny_pair

    small, large = build_tiny_pair(tiny_dir / "pair", arch="qwen3_vl")
    return VLM.from_pretrained(small), VLM.from_pretrained(large)


@pytest.fixture(scope="session")
def tiny_vlm(tiny_dir):
    """Build-and-load one tiny VLM per (arch, thinking), cached for the session."""
    from routedvlm.inference import VLM, build_tiny_vlm

    cache = {}

    def get(arch, thinking=None):
        key = (arch, thinking)
        if key not in cache:
            path = build_tiny_vlm(arch, tiny_dir / f"{arch}-{thinking}", seed=3, thinking=thinking)
            cache[key] = VLM.from_pretrained(path)
        return cache[key]

    return get


@pytest.fixture(scope="session")
def images():
    from PIL import Image

    return {"square": Image.new("RGB", (64, 64), (200, 30, 30)),
            "wide": Image.new("RGB", (128, 32), (20, 200, 40)),
            "tall": Image.new("RGB", (32, 128), (20, 40, 200))}


@pytest.fixture(scope="session")
def make_pipeline():
    """A CollaborativePipeline factory with settings that give random tiny models non-empty outputs."""
    from routedvlm.inference import CollaborativePipeline

    def make(small, large, selector="prefix", **kw):
        opts = dict(min_new_tokens=4, max_direct_tokens=6, max_reason_tokens=40, min_reason_tokens=24)
        opts.update(kw)
        return CollaborativePipeline(small, large, selector=selector, **opts)

    return make


_ONE_THREAD_MODULES = ("test_tiny_loading", "test_modes", "test_pipeline", "test_demo_bench", "test_shared_run",
                       "test_streaming", "test_inputs")


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread(request):
    """Tiny models run ~3x faster on one thread than on two contended ones; restored after the module."""
    if not request.module.__name__.rsplit(".", 1)[-1] in _ONE_THREAD_MODULES:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def served(tiny_pair, tmp_path_factory):
    """One `routedvlm serve` subprocess for the session: the tiny pair, a one-shot LightGBM router, an API key,
    one torch thread; {"url", "router", "pid"}."""
    from routed_helpers import save_prompt_router
    from serve_helpers import KEY, LIMIT_FLAGS, PIPE_FLAGS, serve_process

    root = tmp_path_factory.mktemp("serve")
    folder = save_prompt_router(root / "router")
    args = ["--small", tiny_pair[0].name, "--large", tiny_pair[1].name, "--router", str(folder), "--api-key", KEY,
            "--log-level", "warning", "--threads", "1", *PIPE_FLAGS, *LIMIT_FLAGS]
    with serve_process(args, root / "server.log") as (url, proc):
        yield {"url": url, "router": folder, "pid": proc.pid, "log": root / "server.log"}


@pytest.fixture(scope="session")
def served_local(tiny_pair, make_pipeline, served):
    """The served policy run in this process: what every served request must match."""
    from routedvlm.inference.routed import RoutedVLM

    return RoutedVLM(make_pipeline(*tiny_pair), str(served["router"]))
