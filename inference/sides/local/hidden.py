"""A local model's own hidden states, captured during the generate calls it makes anyway (the self-probe's input).

`enable_capture(model, layers)` puts forward hooks on chosen text decoder layers. While enabled, every
`timed_generate` call on that model stores a `HiddenStates` in `Generation.hidden`: each layer's output at the
last prompt position (the call's prefill) and at every answer position fed back during decoding. No second
forward pass, and nothing happens on a model without capture. Remote (HTTP) models have no hidden states.
"""
from __future__ import annotations

from dataclasses import dataclass

from routedvlm.errors import ConfigError

CAPTURE_ATTR = "_routedvlm_hidden_capture"
POSITIONS = ("prompt_last", "answer_mean", "all_mean")


def decoder_layers(model):
    """The text decoder's layer list of a transformers VLM (`...language_model.layers` / `...text_model.layers`)."""
    for name, module in model.named_modules():
        if name.endswith(("language_model.layers", "text_model.layers")) and hasattr(module, "__len__"):
            return module
    raise ConfigError(f"Cannot find the text decoder layers of {type(model).__name__}: hidden-state capture supports "
                      "models whose language model exposes `language_model.layers` or `text_model.layers`.")


def resolve_layers(model, layers) -> list[int]:
    """Layer indices (negative counts from the end) as sorted non-negative ints; ConfigError when out of range."""
    return normalize_layers(layers, len(decoder_layers(model)))


def normalize_layers(layers, n_layers: int) -> list[int]:
    """`layers` (negative counts from the end) of an `n_layers`-layer decoder as sorted non-negative ints; ConfigError
    when out of range (also for a model known only by its layer count: the vLLM side, `sides/vllm/hidden.py`)."""
    out = []
    for layer in layers:
        if isinstance(layer, bool) or not isinstance(layer, int) or not -n_layers <= layer < n_layers:
            raise ConfigError(f"Hidden-state layers must be integers in [-{n_layers}, {n_layers - 1}] for this "
                              f"{n_layers}-layer model. Got {layer!r}.")
        out.append(layer % n_layers)
    return sorted(set(out))


@dataclass
class HiddenStates:
    """Per captured layer: `prompt_last` (the output at the last prompt token, shape [hidden]) and `answer`
    (outputs at the answer tokens fed back while decoding, shape [n, hidden]; n = answer tokens - 1)."""

    layers: list
    prompt_last: dict
    answer: dict

    def vector(self, position: str, layers=None):
        """The probe's input: `position` of each layer in `layers` (default all captured), concatenated."""
        import numpy as np

        if position not in POSITIONS:
            raise ConfigError(f"The hidden-state position must be one of {POSITIONS}. Got {position!r}.")
        parts = []
        for layer in self.layers if layers is None else layers:
            if layer not in self.prompt_last:
                raise ConfigError(f"Layer {layer} was not captured (captured: {self.layers}).")
            first, rest = self.prompt_last[layer], self.answer[layer]
            if position == "prompt_last":
                parts.append(first)
            elif position == "answer_mean" and len(rest):
                parts.append(rest.mean(axis=0))
            else:  # all_mean, or answer_mean of a one-token answer
                parts.append(np.vstack([first[None, :], rest]).mean(axis=0))
        return np.concatenate(parts).astype(np.float32)


class HiddenCapture:
    """Forward hooks recording the last position of every forward pass of the chosen decoder layers."""

    def __init__(self, model, layers):
        self.layers = resolve_layers(model, layers)
        blocks = decoder_layers(model)
        self.active, self.buffer = False, {}
        self.handles = [blocks[i].register_forward_hook(self._hook(i)) for i in self.layers]

    def _hook(self, index: int):
        def hook(module, args, output):
            if self.active:
                h = output[0] if isinstance(output, tuple) else output
                self.buffer[index].append(h[0, -1].detach().float().cpu().numpy())
        return hook

    def start(self) -> None:
        self.buffer, self.active = {i: [] for i in self.layers}, True

    def finish(self) -> HiddenStates | None:
        import numpy as np

        self.active = False
        if not all(self.buffer.get(i) for i in self.layers):
            return None
        return HiddenStates(list(self.layers), {i: v[0] for i, v in self.buffer.items()},
                            {i: np.asarray(v[1:]).reshape(len(v) - 1, v[0].shape[-1]) for i, v in self.buffer.items()})

    def close(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []


def enable_capture(model, layers) -> HiddenCapture:
    """Capture `layers` on every later `timed_generate` call of `model`; idempotent for the same layers
    (a different set replaces the hooks)."""
    current = getattr(model, CAPTURE_ATTR, None)
    wanted = resolve_layers(model, layers)
    if current is not None and current.layers == wanted:
        return current
    disable_capture(model)
    capture = HiddenCapture(model, wanted)
    setattr(model, CAPTURE_ATTR, capture)
    return capture


def disable_capture(model) -> None:
    current = getattr(model, CAPTURE_ATTR, None)
    if current is not None:
        current.close()
        delattr(model, CAPTURE_ATTR)


def capture_of(model) -> HiddenCapture | None:
    return getattr(model, CAPTURE_ATTR, None)
