"""The small VLM's own state as meaning features: `feat__small_direct__state_<i>`, the small model's hidden state at the
last prompt token of its `small_direct` pass (it has read the image and the question, nothing of its answer yet),
reduced to `dims` values by a seeded Gaussian random projection.

Stage: `small_direct` — free whenever that stage runs (the state is read by forward hooks during the call it makes
anyway, `inference/sides/local/hidden.py`), so a policy that uses the columns pays `small_direct` on every request, like any other
`feat__small_direct__...` feature. Default layer: the last decoder layer (-1), the state the model's own first answer
token is read from (it is what the small model "concluded" from image + question; the toy small model has 2 layers).
`StateFeatures.spec()` (model, weights hash, layer, position, projection seed, dims) goes into the labels' metadata
(`state`) and the router's policy.json (`params.state`); `state_for_policy` verifies the small model against it and
switches on the capture. Same code in the labeller (`routedvlm labels add-features`) and the runtime (RoutedVLM).
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

from routedvlm.errors import ConfigError

log = logging.getLogger(__name__)
PREFIX = "feat__small_direct__state_"
STAGE = "small_direct"
DEFAULT_DIMS = 16
DEFAULT_LAYER = -1
POSITION = "prompt_last"
_ACTIVE: list = [None]  # the spec key whose columns the registry holds now


def state_name(i: int) -> str:
    return f"{PREFIX}{i:03d}"


def is_state_feature(name: str) -> bool:
    return str(name).startswith(PREFIX)


def _text_config(folder) -> dict:
    try:
        config = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"The small VLM for state features must be a checkpoint folder with a config.json. Got "
                          f"{str(folder)!r} ({exc}).") from None
    return config.get("text_config") or config


class StateFeatures:
    """A small checkpoint's hidden state at `layer` (negative counts from the end), projected to `dims` values."""

    def __init__(self, model: str, *, n_layers: int, hidden_size: int, layer: int = DEFAULT_LAYER,
                 dims: int = DEFAULT_DIMS, seed: int = 0, weights_sha256: str | None = None):
        import numpy as np

        from ..sides.local.hidden import normalize_layers

        if isinstance(dims, bool) or not isinstance(dims, int) or dims < 1:
            raise ConfigError(f"The `state_dims` parameter must be a positive integer. Got {dims!r} instead.")
        self.model, self.weights_sha256 = str(model), weights_sha256
        self.n_layers, self.hidden_size, self.seed = int(n_layers), int(hidden_size), int(seed)
        self.layer = normalize_layers([layer], self.n_layers)[0]
        self.dims = min(dims, self.hidden_size)
        rng = np.random.default_rng(self.seed)
        self.projection = (rng.standard_normal((self.hidden_size, self.dims)) / np.sqrt(self.dims)).astype(np.float32)
        self.names = [state_name(i) for i in range(self.dims)]

    @classmethod
    def from_checkpoint(cls, folder, *, layer: int = DEFAULT_LAYER, dims: int = DEFAULT_DIMS, seed: int = 0):
        from routedvlm.router.checkpoints import portable_path, weights_hash

        text = _text_config(folder)
        return cls(portable_path(folder), n_layers=int(text["num_hidden_layers"]), hidden_size=int(text["hidden_size"]),
                   layer=layer, dims=dims, seed=seed, weights_sha256=weights_hash(folder))

    @classmethod
    def from_spec(cls, spec: dict):
        return cls(spec["model"], n_layers=int(spec["n_layers"]), hidden_size=int(spec["hidden_size"]),
                   layer=int(spec["layer"]), dims=int(spec["dims"]), seed=int(spec.get("projection_seed", 0)),
                   weights_sha256=spec.get("weights_sha256"))

    def values(self, hidden):
        """The projected state of one `HiddenStates` (what a `small_direct` Generation carries as `.hidden`)."""
        return hidden.vector(POSITION, [self.layer]) @ self.projection

    def spec(self) -> dict:
        return {"kind": "small-vlm-state", "model": self.model, "weights_sha256": self.weights_sha256,
                "n_layers": self.n_layers, "layer": self.layer, "position": POSITION, "hidden_size": self.hidden_size,
                "dims": self.dims, "projection": "gaussian", "projection_seed": self.seed, "features": list(self.names),
                "stage": STAGE, "ms_per_prompt": 0.0}

    def key(self) -> str:
        return repr(sorted((k, str(v)) for k, v in self.spec().items() if k != "model"))


def _hidden_of(stage):
    generation = stage.get("generation") if isinstance(stage, dict) else getattr(stage, "generation", None)
    return getattr(generation, "hidden", None)


def register_state(state: StateFeatures) -> None:
    """Register `state`'s columns in the feature registry (`inference/features.py`); one projection per
    FeatureContext serves every column. A `small_direct` result without hidden states is a ConfigError."""
    from ..features import FEATURES, feature

    def column(i):
        def value(ctx):
            cache = ctx.__dict__.setdefault("_state", {})
            if "v" not in cache:
                hidden = _hidden_of(ctx.stage(STAGE))
                if hidden is None or state.layer not in hidden.prompt_last:
                    raise ConfigError(f"The small_direct pass carried no hidden state of layer {state.layer}: state "
                                      "features need a local small model with capture on (state_for_policy / "
                                      "capture_hidden), not a remote one.")
                cache["v"] = state.values(hidden)
            return float(cache["v"][i])
        return value

    unregister_state()
    for i, name in enumerate(state.names):
        feature(name)(column(i))
    _ACTIVE[0] = state.key()


def unregister_state() -> None:
    from ..features import FEATURES

    for name in [n for n in FEATURES if is_state_feature(n)]:
        del FEATURES[name]
    _ACTIVE[0] = None


def enable_state(state: StateFeatures, small_side) -> None:
    """Register the columns and make `small_side` capture the state's layer in every call."""
    small_side.capture_hidden([state.layer])
    register_state(state)


def state_for_policy(params: dict, small_side=None):
    """The StateFeatures a router's `params["state"]` names (None when none), registered; with `small_side`, its
    checkpoint is verified against the recorded weights hash and its capture switched on. ConfigError when the small
    model differs from the one the router was trained with."""
    spec = (params or {}).get("state")
    if not spec:
        return None
    state = StateFeatures.from_spec(spec)
    if small_side is not None:
        _verify(small_side, spec)
        small_side.capture_hidden([state.layer])
    if _ACTIVE[0] != state.key():
        register_state(state)
    return state


def _verify(side, spec: dict) -> None:
    from routedvlm.router.checkpoints import weights_hash

    folder = (side.describe() or {}).get("checkpoint")
    if not folder or not Path(folder).is_dir():
        return  # a side without a local folder: the capture itself fails clearly when it returns no state
    found = weights_hash(folder)
    if spec.get("weights_sha256") and found != spec["weights_sha256"]:
        raise ConfigError(f"The router's state features were made by the small model {spec.get('model')!r} "
                          f"(weights {spec['weights_sha256']}), but this RoutedVLM's small model {folder!r} has weights "
                          f"{found}. Load the same small checkpoint or retrain the router.")
    text = _text_config(folder)
    if int(text.get("hidden_size", -1)) != int(spec["hidden_size"]):
        raise ConfigError(f"The router's state features need a small model of hidden size {spec['hidden_size']}; "
                          f"{folder!r} has {text.get('hidden_size')}.")
