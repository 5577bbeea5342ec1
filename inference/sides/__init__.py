"""Model sides: the `ModelSide` interface and its implementations — `VLM` (a transformers checkpoint in this
process), `OpenAIVLM` (a model behind an OpenAI-compatible server) and `VLLMEngine` (an in-process vLLM engine,
spec 'vllm:<checkpoint folder>'); files in docs/layout.md.

`load_side(spec)` turns what users write (a path, a hub id, '<base_url>#<model id>', 'vllm:<folder>', or a side
object) into a side; `load_sides(specs)` a list of them, cheapest first, into a ladder's sides. Which kind a spec
names, and what that kind declares, is the spec table (`sides/kinds.py`): a new kind is its module plus one line there.
"""
from __future__ import annotations

import os

from .base import THINK_CLOSE, THINK_OPEN, ModelSide

__all__ = ["THINK_CLOSE", "THINK_OPEN", "ModelSide", "load_side", "load_sides"]


def load_side(spec, *, reasoner=None, **local_kwargs) -> ModelSide:
    """A side from a `ModelSide` (returned as is), '<base_url>#<model id>' (an OpenAI-compatible server, API key
    from $ROUTEDVLM_BACKEND_API_KEY; `reasoner` another such spec or a model id on the same server), 'vllm:<folder>'
    (an in-process vLLM engine, `sides/vllm/side.py`; `reasoner` another such spec; `device`/`dtype` are the
    engine's: $ROUTEDVLM_VLLM_ENGINE_ARGS), or a checkpoint folder / hub id (`VLM.from_pretrained(spec,
    reasoner=reasoner, **local_kwargs)`: `device`, `dtype`, ...)."""
    if not isinstance(spec, (str, os.PathLike)):
        return spec
    from .kinds import load_spec

    return load_spec(str(spec), reasoner=reasoner, **local_kwargs)


def load_sides(specs, **local_kwargs) -> list[ModelSide]:
    """The sides of a ladder from a list of specs, cheapest first (each as `load_side` takes it; `local_kwargs` go to
    every local checkpoint). Raises ConfigError for a list of fewer than 2 or more than `MAX_LADDER` entries, or an
    entry that is neither a spec nor a side, naming every bad entry at once."""
    from routedvlm.errors import ConfigError
    from routedvlm.router.strategies import MAX_LADDER

    if isinstance(specs, (str, os.PathLike, ModelSide)) or not hasattr(specs, "__iter__"):
        raise ConfigError(f"A ladder of models must be a list of 2 to {MAX_LADDER} models, cheapest first (checkpoint "
                          f"folders, hub ids, '<base_url>#<model id>' or ModelSide objects). Got {specs!r}.")
    specs = list(specs)
    bad = [f"#{i}: {s!r}" for i, s in enumerate(specs)
           if not (isinstance(s, (str, os.PathLike)) or hasattr(s, "run_direct")) or (isinstance(s, str) and not s.strip())]
    if not 2 <= len(specs) <= MAX_LADDER or bad:
        got = f"entries that are not models ({'; '.join(bad)})" if bad else f"a list of {len(specs)}"
        raise ConfigError(f"A ladder of models must be a list of 2 to {MAX_LADDER} models, cheapest first (checkpoint "
                          f"folders, hub ids, '<base_url>#<model id>' or ModelSide objects). Got {got}.")
    return [load_side(s, **local_kwargs) for s in specs]
