"""The LoRA probe's network: the small VLM (+ a LoRA adapter on its last decoder layer) and the head that reads its
last hidden state at the final prompt position (+ stage features) into P(correct) per candidate strategy.

`SharedPrefill` is the small model's `small_direct` state RoutedVLM hands over so the probe costs one token.
"""
from __future__ import annotations

import contextlib
import copy
import logging
from pathlib import Path

import numpy as np

from routedvlm.errors import RouterError
from .files import load_probe, read_plain, save_probe, target_regex

log = logging.getLogger(__name__)
SHARED_ADAPTER = "routedvlm_probe"  # the adapter's name when injected into RoutedVLM's own small model


class SharedPrefill:
    """The small model's `small_direct` state RoutedVLM hands to the probe: its KV cache (prompt + answer),
    the prompt length and the Qwen-VL rope offset of that prefill. The cache is cropped in place."""

    def __init__(self, cache, prompt_tokens: int, rope_deltas=None):
        self.cache, self.prompt_tokens, self.rope_deltas = cache, int(prompt_tokens), rope_deltas


class ProbeNet:
    """The small VLM (+ LoRA on its last layer when `lora_r > 0`) and the head; `p_correct` is the forward."""

    def __init__(self, vlm, strategies, features, *, lora_r: int = 8, lora_alpha: int = 16, head_hidden: int = 64,
                 seed: int = 0):
        import torch

        self.vlm, self.strategies, self.features = vlm, list(strategies), list(features)
        self.lora_r, self.lora_alpha, self.head_hidden = int(lora_r), int(lora_alpha), int(head_hidden)
        torch.manual_seed(seed)
        for p in vlm.model.parameters():
            p.requires_grad_(False)
        self.peft = None
        if self.lora_r > 0:
            from peft import LoraConfig, get_peft_model

            conf = LoraConfig(r=self.lora_r, lora_alpha=self.lora_alpha, lora_dropout=0.0, bias="none",
                              target_modules=target_regex(vlm.model))
            self.peft = get_peft_model(vlm.model, conf)
        d = vlm.model.config.get_text_config().hidden_size
        n_f = len(self.features)
        self.head = torch.nn.Sequential(torch.nn.Linear(d + n_f, head_hidden), torch.nn.GELU(),
                                        torch.nn.Linear(head_hidden, len(self.strategies)))
        self.feat_mean, self.feat_std = torch.zeros(n_f), torch.ones(n_f)
        self._tuners, self._adapter = [], None  # set by `adopt`
        self.eval()

    def adopt(self, small_vlm) -> None:
        """Run on `small_vlm` (same base weights) instead of our own copy, which is released: our adapter is
        injected into its model, switched off except during the probe's own passes (its generations are unchanged)."""
        from peft.tuners.tuners_utils import BaseTunerLayer

        if self.lora_r > 0:
            from peft import inject_adapter_in_model

            conf, state = self.adapter_state()
            inject_adapter_in_model(copy.deepcopy(conf), small_vlm.model, adapter_name=SHARED_ADAPTER)
            named = {k.replace(".lora_A.", f".lora_A.{SHARED_ADAPTER}.").replace(".lora_B.", f".lora_B.{SHARED_ADAPTER}."): v
                     for k, v in state.items()}
            bad = small_vlm.model.load_state_dict(named, strict=False).unexpected_keys
            if bad:
                raise RouterError(f"Cannot share the small model's weights: adapter keys {bad[:3]} do not fit it.")
            self._adapter = (conf, state)
            self._tuners = [m for m in small_vlm.model.modules() if isinstance(m, BaseTunerLayer)]
            for m in self._tuners:
                m.enable_adapters(False)
        self.vlm, self.peft = small_vlm, None
        self.to(small_vlm.model.device)

    def adapter_state(self) -> tuple:
        """(LoraConfig, adapter weights keyed by module path from the top model) of this probe."""
        if self._adapter is not None:
            return self._adapter
        from peft.utils import get_peft_model_state_dict

        state = {k.removeprefix("base_model.model."): v for k, v in get_peft_model_state_dict(self.peft).items()}
        return self.peft.peft_config["default"], state

    @contextlib.contextmanager
    def adapter_on(self):
        """The adapter is active inside (a no-op unless the weights are shared with the small model)."""
        for m in self._tuners:
            m.enable_adapters(True)
        try:
            yield
        finally:
            for m in self._tuners:
                m.enable_adapters(False)

    def trainable(self) -> list:
        lora = [p for p in self.vlm.model.parameters() if p.requires_grad]
        return lora + list(self.head.parameters())

    def to(self, device, dtype=None) -> "ProbeNet":
        """Move the VLM (and cast it to `dtype`, e.g. the small model's) and the head (kept float32) to `device`."""
        self.vlm.model.to(device=device, dtype=dtype) if dtype is not None else self.vlm.model.to(device)
        self.head.to(device)
        self.feat_mean, self.feat_std = self.feat_mean.to(device), self.feat_std.to(device)
        return self

    def train(self):
        self.vlm.model.train()
        self.head.train()

    def eval(self):
        self.vlm.model.eval()
        self.head.eval()

    # ---- forward ----
    def prompt_text(self, question: str) -> str:
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
        return self.vlm.render(messages, "direct")

    def encode(self, image, question: str) -> dict:
        """Model inputs of the small model's direct prompt (the prompt `small_direct` prefills)."""
        from routedvlm.inference.inputs import load_image

        return self.vlm.encode(load_image(image), self.prompt_text(question))

    def hidden(self, inputs: dict):
        """Last-layer hidden state (after the final norm) at the final prompt position: (1, d) float."""
        with self.adapter_on():
            out = self.vlm.model.model(**inputs, use_cache=False)
        return out.last_hidden_state[:, -1].float()

    def shared_hidden(self, shared: SharedPrefill, question: str):
        """The same hidden state from the small model's own direct-prompt cache: re-feed the last prompt token."""
        import torch

        cache = shared.cache
        keep = shared.prompt_tokens - 1
        if cache.get_seq_length() > keep:
            cache.crop(-(cache.get_seq_length() - keep))
        owner = self.vlm.model.model
        self.vlm.set_rope_state(shared.rope_deltas)
        last = self.vlm.text_ids(self.prompt_text(question))[-1]
        ids = torch.tensor([[last]], device=self.vlm.device)
        with self.adapter_on():
            out = owner(input_ids=ids, cache=cache, use_cache=True)
        return out.last_hidden_state[:, -1].float()

    def feature_tensor(self, rows: list[dict]):
        import torch

        x = torch.tensor([[_num(r.get(f)) for f in self.features] for r in rows], dtype=torch.float32,
                         device=self.feat_mean.device)
        x = (x - self.feat_mean) / self.feat_std
        return torch.nan_to_num(x, nan=0.0).reshape(len(rows), len(self.features))

    def logits(self, hidden, feats):
        import torch

        return self.head(torch.cat([hidden, feats.to(hidden.device)], dim=1))

    def p_correct(self, row: dict, shared: SharedPrefill | None = None) -> tuple[np.ndarray, bool]:
        """(P(correct) per strategy, whether the prefill was shared) for one sample row."""
        import torch

        image, question = sample_inputs(row)
        with torch.inference_mode():
            h, used = None, False
            if shared is not None:
                try:
                    h, used = self.shared_hidden(shared, question), True
                except Exception as exc:  # a cache layout we cannot crop: fall back to our own prefill
                    log.warning("cannot share the small model's prefill (%s: %s); the probe prefills itself",
                                type(exc).__name__, exc)
            if h is None:
                h = self.hidden(self.encode(image, question))
            p = torch.sigmoid(self.logits(h, self.feature_tensor([row]).to(h.device)))[0]
        return p.cpu().numpy().astype(np.float64), used

    # ---- files (files.py) ----
    def save(self, directory: Path) -> dict:
        return save_probe(self, directory)

    def load_weights(self, directory: Path) -> None:
        """Load the adapter (if any) and the head saved by `save` into this net (RouterLoadError if they do not fit)."""
        load_probe(self, read_plain(directory))


def sample_inputs(row: dict) -> tuple[object, str]:
    """(image, question) of a sample row: `image` (PIL or path) or the first of `images`, and `question`."""
    image = row.get("image")
    if image is None and row.get("images") is not None and len(row["images"]):
        image = row["images"][0]
    question = row.get("question")
    if image is None or not isinstance(question, str) or not question.strip():
        raise RouterError("The lora-probe router reads the sample itself: pass `image` (a PIL image or a path; or "
                          f"`images`) and a non-empty `question` with the features. Got image={type(image).__name__}, "
                          f"question={question!r}.")
    return image, question


def _num(v) -> float:
    return float("nan") if v is None else float(v)

