"""The local side kind: a transformers checkpoint in this process (`VLM`), with its stages, timed generation, the
per-sample prompt cache, hidden-state hooks and processor loading. The spec table's loader is `load`."""
from .side import VLM, load, resolve_device, set_threads, torch_dtype

__all__ = ["VLM", "load", "resolve_device", "set_threads", "torch_dtype"]
