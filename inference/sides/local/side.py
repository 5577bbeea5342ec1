"""`VLM`: a model side (`ModelSide`) loaded in this process with transformers — checkpoint, modes, prompts.

A side is one hybrid checkpoint with a thinking switch (`enable_thinking` in its chat template), an
answerer plus an optional reasoner checkpoint (`reasoner=`), or a checkpoint without a thinking mode
(reasoning from `PromptConfig.reason_suffix`; a thinking-only checkpoint asked for a direct answer gets
an empty think block prefilled). A mode a side cannot provide raises `ModeUnavailableError`.
"""
from __future__ import annotations

import logging
import pathlib

from routedvlm.errors import ConfigError, ModeUnavailableError, ModelLoadError, one_of

from . import stages
from ...prompts import DEFAULT_PROMPTS, PromptConfig
from ..base import THINK_CLOSE, ModelSide, continue_partial
from ..chat import ChatFormat

logger = logging.getLogger(__name__)
STYLES = ("always", "auto", "hybrid", "never")


def resolve_device(device) -> str:
    """'auto' -> 'cuda' when a CUDA device is present, else 'cpu'; any other device name as given."""
    if device is None or str(device) == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return str(device)


def set_threads(threads: int | None) -> int:
    """Set torch's intra-op thread count (`threads` > 0; 0 or None keeps torch's default); returns the count in use.

    One thread per process gives stable per-request latencies on a shared CPU (torch's default, one per core,
    makes concurrent processes contend); raise it on a dedicated machine."""
    import torch

    if threads:
        torch.set_num_threads(int(threads))
    return torch.get_num_threads()


def torch_dtype(dtype):
    """A torch dtype from a dtype or its name (None stays None)."""
    import torch

    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str) and isinstance(getattr(torch, dtype, None), torch.dtype):
        return getattr(torch, dtype)
    raise ConfigError(f"The `dtype` parameter must be a torch dtype or a name such as 'bfloat16'. Got {dtype!r} instead.")


class VLM(ChatFormat, ModelSide):
    """A loaded image-text-to-text checkpoint with its processor, in direct and reasoning modes.

    Attributes: `model`, `processor`, `tokenizer`, `name`, `style` ("hybrid", "always" or "never": how the
    chat template handles thinking), `reasoner` (a VLM serving the reasoning mode, or None), `prompts`.
    Stateful (one call at a time); returns hidden states (see hidden.py).
    """

    kind = "local"
    stateful = True
    shares_prefixes = True
    returns_hidden_states = True
    loaded_on: str | None = None  # the device name `from_pretrained` was given (resolved), as the metadata records it

    def __init__(self, model, processor, tokenizer, *, name: str, style: str = "auto", reasoner: "VLM | None" = None,
                 prompts: PromptConfig = DEFAULT_PROMPTS, reason_prompt: bool = True):
        if style not in STYLES:
            raise ConfigError(f"The `thinking` parameter of VLM must be one of {one_of(STYLES)}. Got {style!r} instead.")
        self.model, self.processor, self.tokenizer, self.name = model, processor, tokenizer, name
        model._routedvlm_tokenizer = tokenizer  # what transformers' `stop_strings` need (sampling.generate_kwargs)
        self.prompts, self.reasoner, self.reason_prompt = prompts, reasoner, reason_prompt
        self.style = self._detect_style() if style == "auto" else style
        self.think_close_id = self._single_id(THINK_CLOSE)

    @classmethod
    def from_pretrained(cls, name_or_path, device: str = "auto", dtype=None, *, reasoner=None, thinking: str = "auto",
                        prompts: PromptConfig | None = None, reason_prompt: bool = True,
                        attn_implementation: str | None = None) -> "VLM":
        """Load a checkpoint folder (or cached hub id) through `AutoModelForImageTextToText` + its processor.

        device: "auto" (CUDA when present, else CPU), "cpu", "cuda", "cuda:1", ...
        reasoner: a second checkpoint (path or VLM) that serves the reasoning mode (e.g. the -Thinking
        sibling of an -Instruct model). thinking: "auto" (read from the chat template), "hybrid", "always"
        or "never". reason_prompt: whether a side without a thinking mode may reason from a prompt; if
        False, reasoning strategies raise ModeUnavailableError.
        """
        from transformers import AutoConfig, AutoModelForImageTextToText

        from .processors import load_processor

        path, device = str(name_or_path), resolve_device(device)
        if not pathlib.Path(path).exists() and path.count("/") != 1:
            raise ModelLoadError(f"The checkpoint {path!r} is neither an existing folder nor a hub id 'org/name'.")
        try:
            config = AutoConfig.from_pretrained(path)
            kwargs = {"dtype": torch_dtype(dtype)} if dtype is not None else {}
            if attn_implementation:
                kwargs["attn_implementation"] = attn_implementation
            model = AutoModelForImageTextToText.from_pretrained(path, **kwargs).to(device).eval()
        except (OSError, ValueError, KeyError) as exc:
            raise ModelLoadError(f"Cannot load {path!r} as an image-text-to-text model: {exc}") from exc
        processor, tokenizer = load_processor(path, config.model_type)
        if isinstance(reasoner, (str, pathlib.Path)):
            reasoner = cls.from_pretrained(reasoner, device, dtype, thinking="auto", prompts=prompts)
        vlm = cls(model, processor, tokenizer, name=path, style=thinking, reasoner=reasoner,
                  prompts=prompts or DEFAULT_PROMPTS, reason_prompt=reason_prompt)
        vlm.loaded_on = device
        return vlm

    @classmethod
    def from_openai(cls, base_url: str, model: str, api_key: str | None = None, *, timeout: float = 60.0,
                    max_retries: int = 2, thinking: str = "hybrid", reasoner=None, **kwargs) -> "VLM":
        """A model served by an OpenAI-compatible server (vLLM, SGLang, `routedvlm serve`), usable as a side of
        the pipeline. thinking: "hybrid" (switched with `chat_template_kwargs.enable_thinking`), "always" or
        "never"; reasoner: a model id on the same server (or an OpenAIVLM) serving the reasoning mode.
        kwargs: `prompts`, `top_logprobs`, `reason_prompt`, `require_prefix_cache`. See `sides/http/side.py` for what is
        measured over HTTP (two-stage decoding relies on the server's prefix caching)."""
        from ..http.side import OpenAIVLM

        return OpenAIVLM.connect(base_url, model, api_key, timeout=timeout, max_retries=max_retries,
                                 thinking=thinking, reasoner=reasoner, **kwargs)

    @property
    def device(self):
        """The device of the weights (read from the first parameter, kept while the model is the same object:
        `model.to()` moves a parameter in place)."""
        kept = getattr(self, "_first_parameter", None)
        if kept is None or kept[0] is not self.model:
            kept = self._first_parameter = (self.model, next(self.model.parameters()))
        return kept[1].device

    @property
    def placement(self) -> tuple:
        """(device, dtype) of the weights: where a module reading this model's states (the LoRA probe) must run."""
        return self.model.device, self.model.dtype

    def rope_state(self):
        """A copy of the rotary-position offsets of the last prefill (Qwen-VL's `rope_deltas`), or None: what a reader
        continuing this model's KV cache needs beside it."""
        from .generation import rope_owner

        owner = rope_owner(self.model)
        return None if owner is None or owner.rope_deltas is None else owner.rope_deltas.clone()

    def set_rope_state(self, rope) -> None:
        """Restore offsets saved by `rope_state` before continuing that prefill's cache (no-op for other models)."""
        from .generation import rope_owner

        owner = rope_owner(self.model)
        if owner is not None:
            owner.rope_deltas = None if rope is None else rope.clone()

    def describe(self) -> dict:
        return {"name": str(self.name), "dtype": str(self.model.dtype).replace("torch.", ""), "device": self.loaded_on or str(self.device),
                "weights": str(self.name), "checkpoint": str(self.name)}

    def capture_hidden(self, layers) -> None:
        from .hidden import enable_capture

        enable_capture(self.model, layers)

    def context_length(self) -> int | None:
        """The position limit of the text model (None when its config has none)."""
        config = getattr(self.model, "config", None)
        if config is None:
            return None
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        return getattr(text, "max_position_embeddings", None)

    def count_prompt_tokens(self, request) -> int:
        text = self.render(request.messages(), "direct")
        images = None if request.image is None else [request.image]
        return int(self.processor(text=[text], images=images, return_tensors="pt")["input_ids"].shape[1])

    # ----- encoding and parsing ----------------------------------------------------------------------------
    def encode(self, image, text: str) -> dict:
        """Processor output (tensors on the model's device) for a rendered prompt and its image (None: text only)."""
        batch = self.processor(text=[text], images=None if image is None else [image], return_tensors="pt")
        dtype = self.model.dtype
        return {k: (v.to(self.device, dtype) if v.is_floating_point() else v.to(self.device)) if hasattr(v, "to") else v
                for k, v in dict(batch).items()}

    def eos_ids(self) -> list:
        eos = self.model.generation_config.eos_token_id
        eos = [eos] if isinstance(eos, int) else list(eos or [])
        return eos + ([self.tokenizer.eos_token_id] if self.tokenizer.eos_token_id is not None else [])

    # ----- ModelSide stages (stages.py holds their local implementations; chat.py renders and parses) -----------
    def run_direct(self, side: str, request, cfg, *, cache=None, upcoming=(), inputs=None):
        return stages.direct_answer(self, side, request, cfg, cache=cache, upcoming=upcoming, inputs=inputs)

    def run_reasoning(self, side: str, request, cfg, max_tokens: int, *, cache=None, upcoming=(), inputs=None):
        return stages.reasoning_run(self, side, request, cfg, max_tokens, cache=cache, upcoming=upcoming, inputs=inputs)

    def finish_answer(self, run, cfg):
        return stages.close_reasoning(run, cfg)

    def answer_cold(self, alias: str, request, question: str, stage: str, cfg):
        return stages.answer_cold(self, alias, request, question, stage, cfg)

    def prefix(self, alias: str, request, cfg):
        return stages.CachedPrefix(self, request, cfg, alias)

    def prompt_cache(self, side: str):
        from .prompt_cache import PromptCache

        return PromptCache(self, side)

    def complete(self, request, mode: str, *, max_tokens: int, min_tokens: int = 0, partial: str | None = None,
                 check_context=None):
        """(Generation, answer or None while reasoning, reasoning or None) of one call; `partial` continues an
        assistant message (one starting with `<think>` replaces the template's own opening think tag)."""
        from .generation import timed_generate

        text = continue_partial(self.render(request.messages(), mode), partial)
        inputs = self.encode(request.image, text)
        if check_context is not None:
            check_context(int(inputs["input_ids"].shape[1]))
        gen = timed_generate(self.model, inputs, max_new_tokens=max_tokens, min_new_tokens=min(min_tokens, max_tokens))
        if mode != "reason" or partial is not None:
            return gen, self.clean_answer(gen.token_ids), None
        _, reasoning, answer = self.split_reasoning(gen.token_ids)
        return gen, answer, reasoning

    def complete_text(self, prompt: str, *, max_tokens: int, min_tokens: int = 0, check_context=None):
        from .generation import timed_generate

        inputs = self.encode(None, prompt)
        if check_context is not None:
            check_context(int(inputs["input_ids"].shape[1]))
        gen = timed_generate(self.model, inputs, max_new_tokens=max_tokens, min_new_tokens=min(min_tokens, max_tokens))
        return gen, self.decode(gen.token_ids)


def load(name_or_path, *, reasoner=None, **kwargs) -> VLM:
    """The spec table's loader: `VLM.from_pretrained(name_or_path, reasoner=reasoner, **kwargs)`."""
    return VLM.from_pretrained(str(name_or_path), reasoner=reasoner, **kwargs)
