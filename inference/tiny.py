"""Tiny, randomly initialised VLMs of real architectures, built offline from configs.

Used by tests, the interim demo and the benchmarks: each builder writes a complete folder (safetensors
weights, config, byte-level tokenizer with a chat template, PIL image processor, processor config) that
`VLM.from_pretrained(folder)` loads through the same path a user's checkpoint takes. Weights are random:
outputs are meaningless, only shapes, caching and timing are real.
"""
from __future__ import annotations

import json
import pathlib

from routedvlm.errors import ConfigError, one_of

from .chat_templates import QWEN_HYBRID_THINKING_TEMPLATE, QWEN_INSTRUCT_TEMPLATE
from .tiny_configs import ARCHS, SIZES, model_config

# Thinking-only checkpoints (e.g. Qwen3-VL-*-Thinking) always open a think block.
QWEN_THINKING_ONLY_TEMPLATE = QWEN_INSTRUCT_TEMPLATE + (
    "{%- if add_generation_prompt -%}{{- '<think>\\n' -}}{%- endif -%}"
)
SMOLVLM_TEMPLATE = (
    "<|im_start|>{%- for message in messages -%}"
    "{{- message['role'] | capitalize -}}:"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'image' -%}{{- '<image>' -}}"
    "{%- elif part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "<end_of_utterance>\n"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- 'Assistant:' -}}{%- endif -%}"
)
LLAVA_OV_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'image' -%}{{- '<image>\\n' -}}"
    "{%- elif part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

SPECIAL_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|image_pad|>", "<|video_pad|>", "<think>", "</think>",
    "<image>", "<video>", "<fake_token_around_image>", "<global-img>", "<end_of_utterance>",
)


def build_tokenizer(special_tokens=SPECIAL_TOKENS):
    """A deterministic byte-level tokenizer: special tokens first, then the 256 byte symbols, no merges."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(special_tokens)}
    for sym in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[sym] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(list(special_tokens))
    return PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>", clean_up_tokenization_spaces=False
    )


def _template(arch: str, thinking: bool | None) -> str:
    if arch in ("smolvlm", "idefics3"):
        base = SMOLVLM_TEMPLATE
    elif arch == "llava_onevision":
        base = LLAVA_OV_TEMPLATE
    else:
        base = QWEN_INSTRUCT_TEMPLATE
    if thinking is None and arch == "qwen3_vl":
        return QWEN_HYBRID_THINKING_TEMPLATE
    if thinking:
        return base + "{%- if add_generation_prompt -%}{{- '<think>\\n' -}}{%- endif -%}"
    return base


def build_tiny_vlm(arch: str, out_dir, *, seed: int = 0, size: str = "tiny", thinking: bool | None = None) -> pathlib.Path:
    """Build a random VLM of `arch` and save it, loadable by `VLM.from_pretrained(out_dir)`.

    arch: "qwen2_vl", "qwen3_vl", "smolvlm" (alias "idefics3": the same SmolVLM/Idefics3 stack) or
    "llava_onevision". size: "tiny" (tests), "small"/"large" (a pair) or "mid" (the benchmark model: hidden 512,
    4 layers, 256 image tokens). thinking: None = family default (qwen3_vl: hybrid template with
    `enable_thinking`; others: no thinking mode), True = thinking-only template (opens `<think>`), False = an
    instruct template that never thinks. Deterministic for a given (arch, size, seed).
    """
    import torch
    from transformers import AutoModelForImageTextToText

    if arch not in ARCHS:
        raise ConfigError(f"The `arch` parameter of build_tiny_vlm must be one of {one_of(ARCHS)}. Got {arch!r} instead.")
    if size not in SIZES:
        raise ConfigError(f"The `size` parameter of build_tiny_vlm must be one of {one_of(SIZES)}. Got {size!r} instead.")
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer()
    tok.chat_template = _template(arch, thinking)
    if arch in ("smolvlm", "idefics3"):
        tok.eos_token = "<end_of_utterance>"
    config, image_processor, proc_extra = model_config(arch, size, tok)
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config).eval()
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.bos_token_id = None
    model.save_pretrained(out)
    tok.save_pretrained(out)
    image_processor.save_pretrained(out)
    (out / "processor_config.json").write_text(json.dumps(proc_extra, indent=2))
    (out / "chat_template.jinja").write_text(tok.chat_template)
    return out


def build_tiny_pair(out_dir, arch: str = "qwen3_vl", *, thinking: bool | None = None) -> tuple[pathlib.Path, pathlib.Path]:
    """A smaller and a larger random model of one family (different seeds): (small_path, large_path)."""
    out = pathlib.Path(out_dir)
    small = build_tiny_vlm(arch, out / f"{arch}-small", seed=1, size="small", thinking=thinking)
    large = build_tiny_vlm(arch, out / f"{arch}-large", seed=2, size="large", thinking=thinking)
    return small, large
