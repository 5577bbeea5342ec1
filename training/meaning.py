"""What a trained router records about the encoder behind its meaning features: the labels' metadata `encoder` entry
(identity, file hashes, projection, measured ms per prompt), copied into policy.json `params.encoder` when the router
uses any `feat__prompt__meaning_<i>` column, so RoutedVLM loads and verifies the same encoder."""
from __future__ import annotations

from routedvlm.errors import TrainingError

PREFIX = "feat__prompt__meaning_"
STATE_PREFIX = "feat__small_direct__state_"


def encoder_params(metadata: dict, features) -> dict:
    """{"encoder": spec} when `features` use meaning columns, plus {"state": spec} when they use the small VLM's state
    columns (TrainingError when the labels do not say what made them), else {}."""
    out = state_params(metadata, features)
    if not any(str(f).startswith(PREFIX) for f in features):
        return out
    spec = (metadata or {}).get("encoder")
    if not spec:
        raise TrainingError("The labels have meaning features (feat__prompt__meaning_*) but their metadata names no "
                            "encoder, so the router could not compute them at run time. Re-import or relabel with "
                            "--encoder, or leave them out with --features.")
    return {**out, "encoder": dict(spec)}


def state_params(metadata: dict, features) -> dict:
    """{"state": spec} (small model, weights hash, layer, projection) when `features` use `feat__small_direct__state_*`."""
    if not any(str(f).startswith(STATE_PREFIX) for f in features):
        return {}
    spec = (metadata or {}).get("state")
    if not spec:
        raise TrainingError("The labels have state features (feat__small_direct__state_*) but their metadata names no "
                            "small model state, so the router could not compute them at run time. Add them with "
                            "`routedvlm labels add-features`, or leave them out with --features.")
    return {"state": {k: v for k, v in spec.items() if k != "recomputed"}}
