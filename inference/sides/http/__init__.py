"""The HTTP side kind: a model behind an OpenAI-compatible server (`OpenAIVLM`, spec '<base_url>#<model id>'), with
its client, reply parsing, spec parsing and server-side prefix. The spec table's loader is `load`."""
from .side import OpenAIVLM, load

__all__ = ["OpenAIVLM", "load"]
