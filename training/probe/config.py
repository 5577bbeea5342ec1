"""The train-router settings of the router types that read the model itself: the LoRA probe (`--router lora-probe`)
and the self-probe (`--router self-probe`). Flags are generated from the fields (training/settings.py); `--dataset`,
declared by both, is one flag that sets both.
"""
from __future__ import annotations

from dataclasses import dataclass

from routedvlm.errors import one_of

from ..settings import RouterSettings, setting

HIDDEN_POSITIONS = ("prompt_last", "answer_mean", "all_mean")


@dataclass
class SamplesSettings(RouterSettings):
    """Where a probe reloads the samples (images, questions) behind the labels."""

    dataset: str | None = setting(None, "data set id or path the labels were made from (default: the labels' "
                                        "sample_source metadata)")


@dataclass
class LoRAProbeConfig(SamplesSettings):
    """A LoRA adapter + head on the small VLM that reads the image and question (training/probe/lora_probe.py)."""

    base: str | None = setting(None, "small VLM checkpoint folder to adapt (default: the labels' small model)")
    epochs: int = setting(3, "training epochs")
    lora_r: int = setting(8, "LoRA rank (0: head only, no adapter)")
    lr: float = setting(1e-3, "AdamW learning rate of the adapter and head")
    batch_size: int = setting(8, "samples per optimizer step")
    resume: bool = setting(False, "continue from the last epoch checkpoint in --output-dir")

    def problems(self) -> list[str]:
        out = []
        for name, low in (("epochs", 1), ("lora_r", 0), ("batch_size", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                out.append(f"`{name}` must be an integer >= {low}; got {value!r}")
        if not 0.0 < self.lr <= 1.0:
            out.append(f"`lr` must be in (0, 1]; got {self.lr!r}")
        return out


@dataclass
class SelfProbeConfig(SamplesSettings):
    """A linear head on the large model's own hidden state of its large_direct pass + the tabular features (cascade
    only, local large model; training/probe/self_probe.py)."""

    large: str | None = setting(None, "large VLM checkpoint folder whose hidden states it reads (default: the labels' "
                                      "large model)")
    hidden_layers: list[int] | None = setting(None, "comma-separated decoder layer indices to read (negative counts "
                                                    "from the end; default: of the layers at 1/3, 1/2, 2/3 of the "
                                                    "depth and the last, the one that best predicts large_direct on "
                                                    "the training rows, by cross-validation)")
    hidden_position: str = setting("all_mean", "which positions of those layers: prompt_last (last prompt token), "
                                               "answer_mean (the answer tokens) or all_mean (both, averaged)",
                                   choices=HIDDEN_POSITIONS)

    def __post_init__(self):
        self._bad_layers = None  # reported by problems(), with every other problem of the configuration
        if self.hidden_layers is not None:
            items = self.hidden_layers.split(",") if isinstance(self.hidden_layers, str) else list(self.hidden_layers)
            try:
                self.hidden_layers = [int(x) for x in (str(i).strip() for i in items) if x] or None
            except ValueError:
                self._bad_layers = self.hidden_layers

    def problems(self) -> list[str]:
        out = []
        if self._bad_layers is not None:
            out.append(f"`hidden_layers` must be comma-separated integers; got {self._bad_layers!r}")
        if self.hidden_position not in HIDDEN_POSITIONS:
            out.append(f"`hidden_position` must be {one_of(HIDDEN_POSITIONS)}; got {self.hidden_position!r}")
        return out
