"""Suite-wide setup: fully offline before any Hugging Face import."""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")



import pytest  # noqa: E402 - after the environment above


VLLM_PORTS = {"small": ("VLLM_PORT_SMALL", 8102), "mid": ("VLLM_PORT_MID", 8103), "large": ("VLLM_PORT_LARGE", 8101)}


def vllm_url(side: str) -> str:
    """Base URL of a toy ladder's vLLM server (`make vllm-up`; ports from $VLLM_PORT_SMALL / _MID / _LARGE)."""
    var, default = VLLM_PORTS[side]
    return f"http://127.0.0.1:{os.environ.get(var, default)}/v1"


def vllm_servers_script():
    """integrations/vllm-cpu/servers.py as a module (standard library only)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "integrations" / "vllm-cpu" / "servers.py"
    spec = importlib.util.spec_from_file_location("vllm_servers_script", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def vllm_mid_server():
    """'<url>#toy-mid' once the toy ladder's mid server (`make vllm-up`) answers a real chat request."""
    try:
        vllm_servers_script().chat_once("mid", timeout=120)
    except Exception as exc:  # noqa: BLE001 - any failure means: not up
        pytest.fail(f"the toy mid model's vLLM server does not answer at {vllm_url('mid')} ({type(exc).__name__}: "
                    f"{exc}): start the servers with `make vllm-env vllm-up`")
    return vllm_url("mid") + "#toy-mid"


@pytest.fixture(scope="session")
def vllm_servers():
    """{"small": '<url>#toy-small', "large": '<url>#toy-large'} once both servers answer a real chat request."""
    script = vllm_servers_script()
    try:
        for side in ("small", "large"):
            script.chat_once(side, timeout=120)
    except Exception as exc:  # noqa: BLE001 - any failure means: not up
        pytest.fail(f"the toy pair's vLLM servers do not answer chat requests at {vllm_url('small')} and "
                    f"{vllm_url('large')} ({type(exc).__name__}: {exc}): start them with `make vllm-env vllm-up` "
                    "(stop them with `make vllm-down`)")
    return {"small": vllm_url("small") + "#toy-small", "large": vllm_url("large") + "#toy-large"}


@pytest.fixture
def gpu_device() -> str:
    """The device the GPU-marked tests run on: $ROUTEDVLM_TEST_DEVICE (set by `routedvlm profile --preset gpu-check`
    from its --device), else 'cuda'."""
    return os.environ.get("ROUTEDVLM_TEST_DEVICE", "cuda")
