"""The pipeline's settings (`PipelineConfig`), its output (`Result`, with the `Handoff` its later stages continue
from), its sides (`ladder_sides`: an ordered list of N >= 2 models named by position; `pipeline_sides`: alias -> side
of any pipeline) and `parallel_sides` (jobs of sides on several devices at once)."""
from __future__ import annotations

from dataclasses import dataclass, field

from routedvlm.errors import ConfigError

from .threads import parallel


@dataclass
class PipelineConfig:
    """Generation settings of a CollaborativePipeline (decoding is greedy throughout)."""

    max_direct_tokens: int = field(default=32, metadata={"help": "max new tokens of a short (direct) answer"})
    max_reason_tokens: int = field(default=512, metadata={"help": "max new tokens of a reasoning run"})
    min_new_tokens: int = field(default=0, metadata={"help": "min new tokens of an answer (random tiny models stop at once without it)"})
    min_reason_tokens: int = field(default=0, metadata={"help": "min new tokens of a reasoning run"})

    def __post_init__(self):
        for name in ("max_direct_tokens", "max_reason_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"The `{name}` field of PipelineConfig must be a positive integer. Got {value!r} instead.")
        for name in ("min_new_tokens", "min_reason_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"The `{name}` field of PipelineConfig must be an integer >= 0. Got {value!r} instead.")
        if self.min_new_tokens > self.max_direct_tokens:
            raise ConfigError(
                f"`min_new_tokens` ({self.min_new_tokens}) must not exceed `max_direct_tokens` ({self.max_direct_tokens})."
            )


@dataclass(frozen=True)
class Handoff:
    """What a result hands to a later stage on the same sample (run-time objects, not part of the answer):
    large_prompt: the large model's cached image+question prefix (the model's `ModelSide.prefix`: a `PromptPrefix`),
    set on `large_direct` results, which `CollaborativePipeline.escalate` continues; reasoning_run: the small model's
    `stages.ReasoningRun`, set on `small_reason` and `transfer_<K>` results, whose reasoning `escalate` reuses."""

    large_prompt: object = None
    reasoning_run: object = None


@dataclass
class Result:
    """The outcome of one strategy on one sample.

    answer: final answer text (reasoning stripped); strategy: the strategy id; keep_tokens: how many reasoning
    tokens were transferred (None when nothing was); reasoning: the small model's reasoning text when it ran
    (the large model's for `large_reason`); trace: stage records (JSON-serialisable dicts, see stages.record);
    generation: the answering `Generation` (answer token ids, `token_logprobs`, `first_token_entropy`,
    `token_times_ms`); reasoning_generation: the reasoning run's Generation (its `token_times_ms` compose the
    latency of reasoning truncated at K tokens); kept_text: the transferred reasoning text; handoff: what a later
    stage continues from (`Handoff`); finish_reason: see `CollaborativePipeline.complete`.
    """

    answer: str
    strategy: str
    keep_tokens: int | None
    reasoning: str | None
    trace: list
    generation: object = field(default=None, repr=False)
    reasoning_generation: object = field(default=None, repr=False)
    kept_text: str | None = None
    handoff: Handoff = field(default_factory=Handoff, repr=False, compare=False)
    finish_reason: str | None = None  # set by `CollaborativePipeline.complete`: "stop" or "length" (hit its budget)

    @property
    def output_tokens(self) -> int:
        """Tokens the answering model generated in its final stage (reasoning included for *_reason)."""
        n = self.generation.output_tokens if self.generation is not None else 0
        if self.strategy.endswith("_reason") and self.reasoning_generation is not None and self.reasoning_generation is not self.generation:
            n += self.reasoning_generation.output_tokens
        return n

    @property
    def token_logprobs(self) -> list:
        return list(self.generation.token_logprobs) if self.generation is not None else []

    @property
    def first_token_entropy(self) -> float:
        return self.generation.first_token_entropy if self.generation is not None else float("nan")

    @property
    def latency_ms(self) -> float:
        """Sum over the trace of vision + prefill + decode time."""
        return sum(r["vision_ms"] + r["prefill_ms"] + r["decode_ms"] for r in self.trace)

    def to_dict(self) -> dict:
        """A JSON-serialisable view (no tensors)."""
        return {
            "answer": self.answer, "strategy": self.strategy, "keep_tokens": self.keep_tokens,
            "reasoning": self.reasoning, "kept_text": self.kept_text, "trace": [dict(r) for r in self.trace],
            "output_tokens": self.output_tokens, "generation": self.generation.to_dict() if self.generation else None,
        }


def pipeline_sides(pipeline) -> dict:
    """alias -> side of a pipeline, cheapest first (`pipeline.sides`)."""
    return dict(pipeline.sides)


def ladder_sides(small=None, large=None, sides=None) -> dict:
    """{alias: ModelSide} in ladder order (`router.strategies.ladder_aliases`) from a (small, large) pair or from
    `sides`: a list of N >= 2 sides or specs for `sides.load_side`, cheapest first."""
    from routedvlm.router.strategies import MAX_LADDER, ladder_aliases

    from .sides import load_side
    from .sides.base import ModelSide

    if sides is None:
        if small is None or large is None:
            raise ConfigError("CollaborativePipeline needs a small and a large side, or `sides=[...]`: a list of 2 to "
                              f"{MAX_LADDER} model sides, cheapest first. Got small={small!r}, large={large!r}.")
        sides = [small, large]
    elif small is not None or large is not None:
        raise ConfigError("Pass either `small` and `large` or `sides=[...]` to CollaborativePipeline, not both.")
    sides = list(sides.values()) if isinstance(sides, dict) else list(sides)
    if not 2 <= len(sides) <= MAX_LADDER:
        raise ConfigError(f"The `sides` parameter of CollaborativePipeline must list 2 to {MAX_LADDER} model sides, "
                          f"cheapest first. Got {len(sides)}.")
    loaded = [s if isinstance(s, ModelSide) else load_side(s) for s in sides]
    return dict(zip(ladder_aliases(len(loaded)), loaded))


def every_model(sides) -> list:
    """Every distinct side object of a ladder's `sides` (alias -> side), cheapest first, and each one's reasoner: what
    a lifecycle call must reach (one object two rungs share counts once)."""
    out = []
    for side in sides.values():
        for model in (side, getattr(side, "reasoner", None)):
            if model is not None and all(model is not seen for seen in out):
                out.append(model)
    return out


def start_sides(sides) -> None:
    """`start()` every model of `sides` (`every_model`), cheapest first: a side that cannot start fails now."""
    for model in every_model(sides):
        model.start()


def close_sides(sides) -> None:
    """`close()` every model of `sides`, the most expensive first; every one is tried, the first failure re-raised."""
    failure = None
    for model in reversed(every_model(sides)):
        try:
            model.close()
        except Exception as exc:  # noqa: BLE001 - the others are still closed
            failure = failure or exc
    if failure is not None:
        raise failure


def parallel_sides(jobs: dict, sides: dict, concurrent: bool) -> dict:
    """Run named jobs {name: (alias, zero-argument callable)}: one after another unless `concurrent`; then the jobs of
    the sides on one device run in order in one thread, the devices in parallel (a pair: `parallel`)."""
    if not concurrent or len(jobs) < 2:
        return {name: fn() for name, (_, fn) in jobs.items()}
    devices = {}
    for alias, side in sides.items():
        devices.setdefault(str(side.device), []).append(alias)
    group_of = {a: (d if len(devices) > 1 else a) for d, aliases in devices.items() for a in aliases}
    groups = {}
    for name, (alias, fn) in jobs.items():
        groups.setdefault(group_of[alias], []).append((name, fn))
    runs = {g: (lambda items=items: {name: fn() for name, fn in items}) for g, items in groups.items()}
    out = {}
    for part in parallel(runs, True).values():
        out.update(part)
    return {name: out[name] for name in jobs}
