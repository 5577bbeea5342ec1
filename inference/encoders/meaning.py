"""The meaning feature family: `feat__prompt__meaning_<i>`, an encoder's embedding of the question, reduced to `dims`
values by a seeded Gaussian random projection (Johnson-Lindenstrauss: distances and angles survive, so a kNN router
and LightGBM both read a few columns instead of hundreds).

Stage: `prompt`. A sentence encoder reads only the request's text, before any VLM runs; its cost is a few ms of CPU per
request, measured when labelling and recorded (`ms_per_prompt`) in the labels' metadata and the router's policy.json
beside the encoder's identity and file hashes. `register_meaning(encoder)` registers the columns in the one feature
registry (`inference/features.py`), so the labeller, the importer and the runtime compute them with the same code;
`encoder_for_policy(params)` loads and verifies the encoder a saved router names.
"""
from __future__ import annotations

import logging
import os

from routedvlm.errors import ConfigError

log = logging.getLogger(__name__)
PREFIX = "feat__prompt__meaning_"
DEFAULT_DIMS = 16
ENCODER_ENV = "ROUTEDVLM_ENCODER"  # overrides the encoder folder a router records (policy.json params.encoder.source)
_LOADED: dict = {}  # encoder spec key -> MeaningFeatures (encoder_for_policy)
_ACTIVE: list = [None]  # the key whose columns the registry holds now


def meaning_name(i: int) -> str:
    return f"{PREFIX}{i:03d}"


def is_meaning_feature(name: str) -> bool:
    return str(name).startswith(PREFIX)


class MeaningFeatures:
    """An encoder plus its projection: `values(texts) -> (n, dims)`; `spec()` is what metadata and policy.json record."""

    def __init__(self, encoder, dims: int = DEFAULT_DIMS, seed: int = 0):
        import numpy as np

        if not isinstance(dims, int) or dims < 1:
            raise ConfigError(f"The `encoder_dims` parameter must be a positive integer. Got {dims!r} instead.")
        self.encoder, self.seed = encoder, int(seed)
        hidden = int(encoder.hidden_size)
        self.dims = min(dims, hidden)
        if self.dims < hidden:
            rng = np.random.default_rng(self.seed)
            self.projection = (rng.standard_normal((hidden, self.dims)) / np.sqrt(self.dims)).astype(np.float32)
        else:
            self.projection = None
        self.names = [meaning_name(i) for i in range(self.dims)]
        self.ms_per_prompt: float | None = None

    def values(self, texts):
        emb = self.encoder.embed(list(texts))
        return emb @ self.projection if self.projection is not None else emb

    def frame(self, texts, index=None, batch_size: int = 32):
        """A DataFrame of the meaning columns for `texts` (batched; the same numbers as one at a time)."""
        import numpy as np
        import pandas as pd

        texts = list(texts)
        parts = [self.values(texts[i:i + batch_size]) for i in range(0, len(texts), batch_size)]
        values = np.concatenate(parts) if parts else np.zeros((0, self.dims), dtype=np.float32)
        return pd.DataFrame(values.astype(np.float64), columns=self.names, index=index)

    def spec(self) -> dict:
        return {**self.encoder.identity(), "dims": self.dims, "projection": "gaussian" if self.projection is not None
                else "none", "projection_seed": self.seed, "features": list(self.names),
                "stage": "prompt", "ms_per_prompt": self.ms_per_prompt}


def load_meaning(source: str, dims: int = DEFAULT_DIMS, seed: int = 0) -> MeaningFeatures:
    """The meaning features of the sentence encoder at `source` (a folder or hub id), registered for compute_features."""
    from .sentence import SentenceEncoder

    meaning = MeaningFeatures(SentenceEncoder(source), dims, seed)
    register_meaning(meaning)
    return meaning


def register_meaning(meaning: MeaningFeatures) -> None:
    """Register `meaning`'s columns in the feature registry; one embedding per FeatureContext serves every column."""
    from ..features import FEATURES, feature

    key = ("meaning", id(meaning))

    def column(i):
        def value(ctx):
            cache = ctx.__dict__.setdefault("_encoded", {})
            if key not in cache:
                cache[key] = meaning.values([ctx.question])[0]
            return float(cache[key][i])
        return value

    for i, name in enumerate(meaning.names):
        FEATURES.pop(name, None)
        feature(name)(column(i))
    _ACTIVE[0] = None


def unregister_meaning() -> None:
    """Remove every meaning column from the feature registry (a process that stops using an encoder; tests)."""
    from ..features import FEATURES

    for name in [n for n in FEATURES if is_meaning_feature(n)]:
        del FEATURES[name]
    _ACTIVE[0] = None




def encoder_for_policy(params: dict):
    """Load (once), verify and register the encoder a router's `params["encoder"]` names (`$ROUTEDVLM_ENCODER`, when
    set, is the folder to load instead); None when it names none. ConfigError when the folder's weights or tokenizer
    differ from the ones the router was trained with."""
    spec = (params or {}).get("encoder")
    if not spec:
        return None
    override = os.environ.get(ENCODER_ENV)
    if override:  # the same encoder files in another place (the hashes are still checked)
        spec = {**spec, "source": override}
    key = repr(sorted((k, str(v)) for k, v in spec.items()))
    if _ACTIVE[0] == key:
        return _LOADED[key]
    if key not in _LOADED:
        meaning = load_meaning(spec["source"], int(spec["dims"]), int(spec.get("projection_seed", 0)))
        found = meaning.spec()
        for field in ("weights_sha256", "tokenizer_sha256"):
            if spec.get(field) and found.get(field) != spec[field]:
                raise ConfigError(f"The router's encoder {spec['source']!r} has {field} {found.get(field)}, but the "
                                  f"router was trained with {spec[field]}. Point the router at the same encoder "
                                  f"files (policy.json params.encoder.source, or ${ENCODER_ENV}) or retrain it.")
        _LOADED[key] = meaning
    register_meaning(_LOADED[key])
    _ACTIVE[0] = key
    return _LOADED[key]
