"""Model sides: the `ModelSide` interface and its implementations — `VLM` (a transformers checkpoint in this
process), `OpenAIVLM` (a model behind an OpenAI-compatible server) and `VLLMEngine` (an in-process vLLM engine,
spec 'vllm:<checkpoint folder>'); files in docs/layout.md.

`load_side(spec)` turns what users write (a path, a hub id, '<base_url>#<model id>', 'vllm:<folder>', or a side
object) into a side;
a new implementation adds its module here and one entry in `load_side`.
"""
from __future__ import annotations

import os

from .base import THINK_CLOSE, THINK_OPEN, ModelSide

__all__ = ["THINK_CLOSE", "THINK_OPEN", "ModelSide", "load_side"]


def load_side(spec, *, reasoner=None, **local_kwargs) -> ModelSide:
    """A side from a `ModelSide` (returned as is), '<base_url>#<model id>' (an OpenAI-compatible server, API key
    from $ROUTEDVLM_BACKEND_API_KEY; `reasoner` another such spec or a model id on the same server), 'vllm:<folder>'
    (an in-process vLLM engine, `sides/vllm_engine.py`; `reasoner` another such spec; `device`/`dtype` are the
    engine's: $ROUTEDVLM_VLLM_ENGINE_ARGS), or a checkpoint folder / hub id (`VLM.from_pretrained(spec,
    reasoner=reasoner, **local_kwargs)`: `device`, `dtype`, ...)."""
    if not isinstance(spec, (str, os.PathLike)):
        return spec
    from ..backends.remote import connect, is_remote

    text = str(spec)
    if is_remote(text):
        return connect(text, reasoner=reasoner)
    if text.startswith("vllm:"):
        from .vllm_engine import VLLMEngine

        return VLLMEngine.from_spec(text, reasoner=reasoner)
    from .local import VLM

    return VLM.from_pretrained(text, reasoner=reasoner, **local_kwargs)
