"""Load a VLM's processor (tokenizer + PIL image processor) without torchvision.

`AutoProcessor` builds the video processor, which imports torchvision; we build the family's processor
class without it instead. The tokenizer, the `*ImageProcessorPil` class named by the image processor's
settings and the processor's own settings (e.g. SmolVLM `image_seq_len`, LLaVA-OneVision `num_image_tokens`)
are read from the folder separately. Two layouts: transformers >= 5.2x writes one `processor_config.json`
holding the image processor's settings under `image_processor`; older ones wrote `preprocessor_config.json`.
"""
from __future__ import annotations

import functools
import inspect
import json
import logging
import pathlib

from routedvlm.errors import ModelLoadError

logger = logging.getLogger(__name__)

# model_type -> processor class name (transformers), for folders that do not name it.
PROCESSOR_BY_MODEL_TYPE = {
    "qwen2_vl": "Qwen2VLProcessor",
    "qwen2_5_vl": "Qwen2_5_VLProcessor",
    "qwen3_vl": "Qwen3VLProcessor",
    "qwen3_vl_moe": "Qwen3VLProcessor",
    "smolvlm": "SmolVLMProcessor",
    "idefics3": "Idefics3Processor",
    "llava_onevision": "LlavaOnevisionProcessor",
    "llava": "LlavaProcessor",
}
_SUB_PROCESSORS = ("image_processor", "tokenizer", "video_processor", "feature_extractor")


def _read_json(path: pathlib.Path) -> dict:
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelLoadError(f"Cannot read {path}: {exc}. Check that the checkpoint folder is complete.") from exc


@functools.lru_cache(maxsize=None)
def without_video(base_name: str):
    """A subclass of the transformers processor `base_name` whose only sub-processors are image + tokenizer."""
    import transformers

    base = getattr(transformers, base_name)

    class _Processor(base):
        def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
            params = inspect.signature(base.__init__).parameters
            if "video_processor" in params:
                kwargs["video_processor"] = None
            base.__init__(self, image_processor=image_processor, tokenizer=tokenizer, chat_template=chat_template, **kwargs)

    # to_dict / save_pretrained keep the kwargs the __init__ signature names (SmolVLM `image_seq_len`, ...): show the
    # base's signature without the video processor
    sig = inspect.signature(base.__init__)
    _Processor.__init__.__signature__ = sig.replace(
        parameters=[p for name, p in sig.parameters.items() if name != "video_processor"])
    # saved checkpoints name the real transformers class, so AutoProcessor (with torchvision) loads them too
    _Processor.__name__, _Processor.__qualname__ = base_name, base_name + "NoVideo"
    return _Processor


def _pil_image_processor(folder: pathlib.Path, config: dict, nested: dict | None = None):
    """The PIL image processor: from `preprocessor_config.json` (`config`) or, when the folder has none, from the
    `image_processor` settings nested in `processor_config.json` (`nested`)."""
    import transformers

    if not config and nested:
        config = nested
    name = config.get("image_processor_type") or ""
    name = name[: -len("Fast")] if name.endswith("Fast") else name
    pil_name = name if name.endswith("Pil") else name + "Pil"
    cls = getattr(transformers, pil_name, None)
    if cls is None:
        raise ModelLoadError(
            f"The image processor {name!r} of {folder} has no PIL variant ({pil_name}) in this transformers; "
            "routedvlm loads processors without torchvision. Use a checkpoint whose preprocessor_config.json "
            "(or processor_config.json `image_processor`) names a supported image processor."
        )
    if config is nested:
        return cls.from_dict({k: v for k, v in config.items() if k != "image_processor_type"})
    return cls.from_pretrained(str(folder))


def load_processor(folder, model_type: str):
    """Build the processor of a local checkpoint folder; returns (processor, tokenizer)."""
    from transformers import AutoTokenizer

    folder = pathlib.Path(folder)
    pre = _read_json(folder / "preprocessor_config.json")
    extra = _read_json(folder / "processor_config.json")
    extra = extra.get("processor", extra) if isinstance(extra.get("processor"), dict) else extra
    tok_cfg = _read_json(folder / "tokenizer_config.json")
    base_name = extra.get("processor_class") or tok_cfg.get("processor_class") or PROCESSOR_BY_MODEL_TYPE.get(model_type)
    if base_name is None:
        raise ModelLoadError(
            f"Cannot tell which processor the {model_type!r} checkpoint in {folder} needs. Supported model types: "
            f"{', '.join(sorted(PROCESSOR_BY_MODEL_TYPE))}; or name it as 'processor_class' in processor_config.json."
        )
    base_name = base_name.removesuffix("NoVideo")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
        nested = extra.get("image_processor") if isinstance(extra.get("image_processor"), dict) else None
        image_processor = _pil_image_processor(folder, pre, nested)
        cls = without_video(base_name)
        params = inspect.signature(getattr(__import__("transformers"), base_name).__init__).parameters
        kwargs = {k: v for k, v in extra.items() if k in params and k not in _SUB_PROCESSORS and k != "chat_template"}
        template = tokenizer.chat_template or extra.get("chat_template")
        chat_file = folder / "chat_template.jinja"
        if template is None and chat_file.is_file():
            template = chat_file.read_text()
        processor = cls(image_processor=image_processor, tokenizer=tokenizer, chat_template=template, **kwargs)
    except ModelLoadError:
        raise
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        raise ModelLoadError(f"Cannot build the {base_name} processor from {folder}: {exc}") from exc
    if template and not tokenizer.chat_template:
        tokenizer.chat_template = template
    return processor, tokenizer
