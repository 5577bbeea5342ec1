"""The in-process vLLM engine side kind (`VLLMEngine`, spec 'vllm:<checkpoint folder>'), with its driver thread,
request/output conversion, prefix-cache prompt and hidden-state extraction. vLLM itself is imported only when an
engine starts. The spec table's loader is `load`."""
from .side import VLLMEngine, load

__all__ = ["VLLMEngine", "load"]
