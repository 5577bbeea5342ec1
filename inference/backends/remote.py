"""Remote sides given as text: '<base_url>#<model id>' (as `RoutedVLM`, `routedvlm serve` and `routedvlm label` take them).

`parse_remote(spec)` splits such a spec (None for a local path or hub id); `connect(spec, reasoner=...)` returns
the `OpenAIVLM` (API key from $ROUTEDVLM_BACKEND_API_KEY); what the server says about the model is `OpenAIVLM.served()`.
"""
from __future__ import annotations

import os

from routedvlm.errors import ConfigError

API_KEY_ENV = "ROUTEDVLM_BACKEND_API_KEY"


def is_remote(spec) -> bool:
    return isinstance(spec, str) and spec.startswith(("http://", "https://"))


def parse_remote(spec) -> tuple[str, str] | None:
    """('<base_url>', '<model id>') of a remote spec, None for anything else; a URL without '#model' is an error."""
    if not is_remote(spec):
        return None
    url, _, model = spec.partition("#")
    if not model:
        raise ConfigError(f"A remote model must be given as '<base_url>#<model id>', e.g. "
                          f"'http://127.0.0.1:8000/v1#Qwen/Qwen3-VL-8B-Instruct'. Got {spec!r}.")
    return url, model


def connect(spec: str, *, reasoner=None, **kwargs):
    """The OpenAIVLM of '<base_url>#<model id>'. reasoner: another remote spec (its own server) or a model id on
    the same server, serving the reasoning mode (a thinking-only model)."""
    from ..sides.openai import OpenAIVLM

    url, model = parse_remote(spec)
    key = os.environ.get(API_KEY_ENV)
    if is_remote(reasoner):
        r_url, r_model = parse_remote(reasoner)
        reasoner = OpenAIVLM.connect(r_url, r_model, key, thinking="always", **kwargs)
    return OpenAIVLM.connect(url, model, key, reasoner=reasoner, **kwargs)

