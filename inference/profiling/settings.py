"""`ProfileSettings`: the grid a latency profile measures (image sizes, prompt and output lengths, repeats, device,
clock), validated on construction; shared by the profiler, the remote profiler and the memory estimate."""
from __future__ import annotations

import dataclasses
import time

from routedvlm.errors import one_of

from .inputs import check_image_sizes, image_area

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


@dataclasses.dataclass
class ProfileSettings:
    """The grid a profile measures (all lists of positive ints)."""

    image_sizes: list = dataclasses.field(default_factory=lambda: [224, 448, 896],
                                          metadata={"help": "image sizes: a side in pixels (square) or 'WxH'"})
    prompt_tokens: list = dataclasses.field(default_factory=lambda: [32, 256, 1024],
                                            metadata={"help": "question lengths in tokens (before the template)"})
    output_tokens: list = dataclasses.field(default_factory=lambda: [1, 16, 64, 256, 1024],
                                            metadata={"help": "output lengths reported end to end; decode runs to the max"})
    repeats: int = dataclasses.field(default=3, metadata={"help": "measurements per grid point"})
    device: str = dataclasses.field(default="auto", metadata={"help": "torch device: auto (cuda when present), cpu, cuda:1"})
    dtype: str | None = dataclasses.field(default=None, metadata={"help": "float32, bfloat16, float16 or None (checkpoint)"})
    seed: int = dataclasses.field(default=0, metadata={"help": "seed of the random images (and of a shape's weights)"})
    warmup: bool = dataclasses.field(default=True, metadata={"help": "one unrecorded call per image size first"})
    clock: str = dataclasses.field(default="wall", metadata={
        "help": "wall (time.perf_counter) or cpu (time.process_time: CPU seconds, for a shared CPU; one thread)"})

    def __post_init__(self):
        from routedvlm.errors import ConfigError

        self.image_sizes = sorted(set(check_image_sizes(self.image_sizes)), key=lambda v: (image_area(v), str(v)))
        for name in ("prompt_tokens", "output_tokens"):
            vals = getattr(self, name)
            if not vals or any(isinstance(v, bool) or not isinstance(v, int) or v <= 0 for v in vals):
                raise ConfigError(f"The `{name}` setting must be a non-empty list of positive integers. Got {vals!r} instead.")
            setattr(self, name, sorted(set(vals)))
        if max(self.output_tokens) < 2:
            raise ConfigError(f"The `output_tokens` setting needs a value of at least 2 so that decode steps are measured. "
                              f"Got {self.output_tokens!r} instead.")
        if isinstance(self.repeats, bool) or not isinstance(self.repeats, int) or self.repeats <= 0:
            raise ConfigError(f"The `repeats` setting must be a positive integer. Got {self.repeats!r} instead.")
        if self.device == "auto":
            from ..sides.local.side import resolve_device

            self.device = resolve_device(self.device)
        if self.clock not in CLOCKS:
            raise ConfigError(f"The `clock` setting must be one of {one_of(CLOCKS)}. Got {self.clock!r} instead.")
        if self.clock == "cpu" and not str(self.device).startswith("cpu"):
            raise ConfigError(f"The `clock` setting 'cpu' measures CPU seconds and cannot time a {self.device!r} device; "
                              "use --clock wall there.")

    @property
    def reference(self) -> tuple[int, int]:
        """(image size, prompt tokens) of the reference input: the lower medians of the grids."""
        return lower_median(self.image_sizes), lower_median(self.prompt_tokens)


def lower_median(values):
    """The lower median of sorted values."""
    return values[(len(values) - 1) // 2]  # values come sorted
