"""What a trained router records about the encoder behind its meaning features: the labels' metadata `encoder` entry
(identity, file hashes, projection, measured ms per prompt), copied into policy.json `params.encoder` when the router
uses any `feat__prompt__meaning_<i>` column, so RoutedVLM loads and verifies the same encoder."""
from __future__ import annotations

from routedvlm.errors import TrainingError

PREFIX = "feat__prompt__meaning_"


def encoder_params(metadata: dict, features) -> dict:
    """{"encoder": spec} when `features` use meaning columns (TrainingError when the labels do not say which encoder
    made them), else {}."""
    if not any(str(f).startswith(PREFIX) for f in features):
        return {}
    spec = (metadata or {}).get("encoder")
    if not spec:
        raise TrainingError("The labels have meaning features (feat__prompt__meaning_*) but their metadata names no "
                            "encoder, so the router could not compute them at run time. Re-import or relabel with "
                            "--encoder, or leave them out with --features.")
    return {"encoder": dict(spec)}
