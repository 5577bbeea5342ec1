"""`VLM`: one side (small or large) of the pipeline — checkpoint loading, direct/reasoning modes, prompts.

A side is one hybrid checkpoint with a thinking switch (`enable_thinking` in its chat template), an
answerer plus an optional reasoner checkpoint (`reasoner=`), or a checkpoint without a thinking mode
(reasoning from `PromptConfig.reason_suffix`; a thinking-only checkpoint asked for a direct answer gets
an empty think block prefilled). A mode a side cannot provide raises `ModeUnavailableError`.
"""
from __future__ import annotations

import logging
import pathlib
import re

from routedvlm.errors import ConfigError, ModeUnavailableError, ModelLoadError, one_of

from .prompts import DEFAULT_PROMPTS, PromptConfig

logger = logging.getLogger(__name__)
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
STYLES = ("always", "auto", "hybrid", "never")
_PROBE = [{"role": "user", "content": "hi"}]


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


def _dtype(dtype):
    import torch

    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str) and isinstance(getattr(torch, dtype, None), torch.dtype):
        return getattr(torch, dtype)
    raise ConfigError(f"The `dtype` parameter must be a torch dtype or a name such as 'bfloat16'. Got {dtype!r} instead.")


class VLM:
    """A loaded image-text-to-text checkpoint with its processor, in direct and reasoning modes.

    Attributes: `model`, `processor`, `tokenizer`, `name`, `style` ("hybrid", "always" or "never": how the
    chat template handles thinking), `reasoner` (a VLM serving the reasoning mode, or None), `prompts`.
    """

    remote = False  # True for a model behind an HTTP API (see from_openai): the stages then call its methods

    def __init__(self, model, processor, tokenizer, *, name: str, style: str = "auto", reasoner: "VLM | None" = None,
                 prompts: PromptConfig = DEFAULT_PROMPTS, reason_prompt: bool = True):
        if style not in STYLES:
            raise ConfigError(f"The `thinking` parameter of VLM must be one of {one_of(STYLES)}. Got {style!r} instead.")
        self.model, self.processor, self.tokenizer, self.name = model, processor, tokenizer, name
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
            kwargs = {"dtype": _dtype(dtype)} if dtype is not None else {}
            if attn_implementation:
                kwargs["attn_implementation"] = attn_implementation
            model = AutoModelForImageTextToText.from_pretrained(path, **kwargs).to(device).eval()
        except (OSError, ValueError, KeyError) as exc:
            raise ModelLoadError(f"Cannot load {path!r} as an image-text-to-text model: {exc}") from exc
        processor, tokenizer = load_processor(path, config.model_type)
        if isinstance(reasoner, (str, pathlib.Path)):
            reasoner = cls.from_pretrained(reasoner, device, dtype, thinking="auto", prompts=prompts)
        return cls(model, processor, tokenizer, name=path, style=thinking, reasoner=reasoner,
                   prompts=prompts or DEFAULT_PROMPTS, reason_prompt=reason_prompt)

    @classmethod
    def from_openai(cls, base_url: str, model: str, api_key: str | None = None, *, timeout: float = 60.0,
                    max_retries: int = 2, thinking: str = "hybrid", reasoner=None, **kwargs) -> "VLM":
        """A model served by an OpenAI-compatible server (vLLM, SGLang, `routedvlm serve`), usable as a side of
        the pipeline. thinking: "hybrid" (switched with `chat_template_kwargs.enable_thinking`), "always" or
        "never"; reasoner: a model id on the same server (or an OpenAIVLM) serving the reasoning mode.
        kwargs: `prompts`, `top_logprobs`, `reason_prompt`, `require_prefix_cache`. See `backends/openai_backend.py` for what is
        measured over HTTP (two-stage decoding relies on the server's prefix caching)."""
        from .backends.openai_backend import OpenAIVLM

        return OpenAIVLM.connect(base_url, model, api_key, timeout=timeout, max_retries=max_retries,
                                 thinking=thinking, reasoner=reasoner, **kwargs)

    # ----- modes -------------------------------------------------------------------------------------------
    def _render_probe(self, **kw) -> str:
        return self.tokenizer.apply_chat_template(_PROBE, tokenize=False, add_generation_prompt=True, **kw)

    def _detect_style(self) -> str:
        if not self.tokenizer.chat_template:
            raise ModelLoadError(f"The checkpoint {self.name!r} has no chat template; add one to its tokenizer.")
        on, off = self._render_probe(enable_thinking=True), self._render_probe(enable_thinking=False)
        if on != off:
            return "hybrid"
        return "always" if on.rstrip().endswith(THINK_OPEN) else "never"

    def _single_id(self, token: str):
        ids = self.tokenizer(token, add_special_tokens=False)["input_ids"]
        return ids[0] if len(ids) == 1 else None

    @property
    def device(self):
        return next(self.model.parameters()).device

    @property
    def placement(self) -> tuple:
        """(device, dtype) of the weights: where a module reading this model's states (the LoRA probe) must run."""
        return self.model.device, self.model.dtype

    def rope_state(self):
        """A copy of the rotary-position offsets of the last prefill (Qwen-VL's `rope_deltas`), or None: what a reader
        continuing this model's KV cache needs beside it."""
        rope = getattr(getattr(self.model, "model", None), "rope_deltas", None)
        return None if rope is None else rope.clone()

    def set_rope_state(self, rope) -> None:
        """Restore offsets saved by `rope_state` before continuing that prefill's cache (no-op for other models)."""
        owner = getattr(self.model, "model", None)
        if owner is not None and hasattr(owner, "rope_deltas"):
            owner.rope_deltas = None if rope is None else rope.clone()

    def reasoning_side(self) -> "VLM":
        """The VLM that serves the reasoning mode: the reasoner checkpoint if given, else this one."""
        side = self.reasoner or self
        if side.style == "never" and not side.reason_prompt:
            raise ModeUnavailableError(
                f"{self.name!r} has no reasoning mode: its chat template has no thinking mode, no `reasoner` "
                "checkpoint was given and reason_prompt=False. Pass reasoner=<a thinking checkpoint> or "
                "reason_prompt=True, or choose a strategy that does not need this side to reason."
            )
        return side

    def mode_name(self, mode: str) -> str:
        """How this checkpoint serves `mode` ("direct"/"reason"): "direct", "no_think", "think" or "prompt"."""
        if mode == "direct":
            return "direct" if self.style == "never" else "no_think"
        return "prompt" if self.style == "never" else "think"

    def render(self, messages: list, mode: str) -> str:
        """The prompt text for `messages` in `mode` ("direct" or "reason"), ending where the model writes."""
        kw = {"enable_thinking": mode == "reason"} if self.style == "hybrid" else {}
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kw)
        if mode == "direct" and self.style == "always" and text.rstrip().endswith(THINK_OPEN):
            text = text.rstrip() + "\n\n" + THINK_CLOSE + "\n\n"
        return text

    def question_for(self, question: str, mode: str) -> str:
        return self.prompts.reason_question(question) if mode == "reason" and self.style == "never" else question

    def close_text(self) -> str:
        """Text that ends reasoning and asks for the answer, for a reasoning run that hit its token limit."""
        return "\n" + THINK_CLOSE + "\n\n" if self.style != "never" else "\n" + self.prompts.answer_marker

    # ----- encoding and parsing ----------------------------------------------------------------------------
    def encode(self, image, text: str) -> dict:
        """Processor output (tensors on the model's device) for a rendered prompt and its image (None: text only)."""
        batch = self.processor(text=[text], images=None if image is None else [image], return_tensors="pt")
        dtype = self.model.dtype
        return {k: (v.to(self.device, dtype) if v.is_floating_point() else v.to(self.device)) if hasattr(v, "to") else v
                for k, v in dict(batch).items()}

    def text_ids(self, text: str) -> list:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def decode(self, ids) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def split_reasoning(self, ids: list):
        """(reasoning_ids, reasoning_text, answer_text or None) of a reasoning-mode generation."""
        eos = set(self._eos_ids())
        if self.style != "never":
            if self.think_close_id is not None and self.think_close_id in ids:
                i = ids.index(self.think_close_id)
                return ids[:i], self.decode(ids[:i]), self.clean_answer(ids[i + 1:])
            raw = self.tokenizer.decode(list(ids))
            if self.think_close_id is None and THINK_CLOSE in raw:  # `</think>` is not a single token here
                reasoning, answer = raw.split(THINK_CLOSE, 1)
                return self.text_ids(reasoning), reasoning, self.clean_answer(answer)
            body = [t for t in ids if t not in eos]
            return body, self.decode(body), None
        text = self.decode(ids)
        marker = self.prompts.answer_marker
        if marker in text:
            reasoning = text.split(marker, 1)[0]
            return self.text_ids(reasoning), reasoning, self.clean_answer(text.split(marker, 1)[1])
        body = [t for t in ids if t not in eos]
        return body, self.decode(body), None

    def clean_answer(self, ids_or_text) -> str:
        """The final answer text: special tokens, think blocks and an answer marker stripped."""
        if isinstance(ids_or_text, str):
            text = ids_or_text
        else:
            ids = list(ids_or_text)
            if self.think_close_id is not None and self.think_close_id in ids:
                ids = ids[len(ids) - ids[::-1].index(self.think_close_id):]
            text = self.decode(ids)
        if THINK_CLOSE in text:
            text = text.rsplit(THINK_CLOSE, 1)[1]
        text = text.replace(THINK_OPEN, "")
        if self.style == "never" and self.prompts.answer_marker in text:
            text = text.split(self.prompts.answer_marker, 1)[1]
        return re.sub(r"\s+", " ", text).strip()

    def _eos_ids(self) -> list:
        eos = self.model.generation_config.eos_token_id
        eos = [eos] if isinstance(eos, int) else list(eos or [])
        return eos + ([self.tokenizer.eos_token_id] if self.tokenizer.eos_token_id is not None else [])
