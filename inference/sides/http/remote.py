"""Remote sides given as text: '<base_url>#<model id>' (as `RoutedVLM`, `routedvlm serve` and `routedvlm label` take them).

`parse_remote(spec)` splits such a spec (None for a local path or hub id); `sides.http.side.load(spec, reasoner=...)`
returns the `OpenAIVLM` (API key from $ROUTEDVLM_BACKEND_API_KEY); what the server says about the model is
`OpenAIVLM.served()`.
"""
from __future__ import annotations

from routedvlm.errors import ConfigError

API_KEY_ENV = "ROUTEDVLM_BACKEND_API_KEY"
URL_PREFIXES = ("http://", "https://")  # a spec starting so names a served model (the spec table's http kind)


def parse_remote(spec) -> tuple[str, str] | None:
    """('<base_url>', '<model id>') of a remote spec, None for anything else; a URL without '#model' is an error."""
    if not (isinstance(spec, str) and spec.startswith(URL_PREFIXES)):
        return None
    url, _, model = spec.partition("#")
    if not model:
        raise ConfigError(f"A remote model must be given as '<base_url>#<model id>', e.g. "
                          f"'http://127.0.0.1:8000/v1#Qwen/Qwen3-VL-8B-Instruct'. Got {spec!r}.")
    return url, model
