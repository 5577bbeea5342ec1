"""Let the registry's CUDA-built torchvision import beside CPU torch in .venv-vllm (installed by `make vllm-env`).

vLLM's Qwen2-VL support imports transformers' Qwen2-VL image processor, which imports `torchvision.transforms.v2`
(pure Python). The torchvision wheel on the registry is a CUDA build: its compiled `_C` extension cannot load
without libtorch_cuda, torchvision then skips every compiled-op registration except two, `register_fake` for
`torchvision::nms` and `torchvision::qnms`, which raise "operator torchvision::nms does not exist". This hook,
run at interpreter start-up by `vllm_cpu_compat.pth`, waits until `torchvision` is first imported and defines those
two schemas first (when torchvision's own extension did not). The compiled ops are never called for images; calling
one raises torchvision's own "Couldn't load custom C++ ops". No effect on processes that never import torchvision.
"""
import importlib.abc
import sys

SCHEMAS = {
    "nms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}
_LIBS = []


def define_missing_schemas() -> list:
    """Define the torchvision op schemas torchvision's meta registrations need when its extension is absent."""
    import torch

    defined = []
    for name, schema in SCHEMAS.items():
        if not _has_schema(torch, name):
            if not _LIBS:
                _LIBS.append(torch.library.Library("torchvision", "FRAGMENT"))
            _LIBS[0].define(name + schema)
            defined.append(name)
    return defined


def _has_schema(torch, name: str) -> bool:
    try:
        torch._C._dispatch_find_schema_or_throw(f"torchvision::{name}", "")
        return True
    except RuntimeError:
        return False


class _TorchvisionHook(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "torchvision":
            sys.meta_path.remove(self)
            _load_extension_first()
        return None  # the normal finders import torchvision itself


def _load_extension_first() -> None:
    """Try torchvision's own extension (a CPU build loads), else define the two schemas."""
    try:
        import torch

        from importlib.util import find_spec

        spec = find_spec("torchvision")
        if spec is not None and spec.submodule_search_locations:
            import glob
            import os

            for lib in glob.glob(os.path.join(list(spec.submodule_search_locations)[0], "_C*.so")):
                try:
                    torch.ops.load_library(lib)
                    return
                except (OSError, RuntimeError):
                    pass
        define_missing_schemas()
    except Exception:  # noqa: BLE001 - never break start-up; torchvision then fails as it would have
        pass


def install() -> None:
    if not any(isinstance(f, _TorchvisionHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _TorchvisionHook())
