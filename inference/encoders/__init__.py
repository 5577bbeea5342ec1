"""Prompt encoders: what a request means, as features (`feat__prompt__meaning_<i>`).

Files: `sentence.py` (a transformers sentence encoder from a folder or hub id, its identity and file hashes, and a tiny
random one for tests), `meaning.py` (the feature family: projection, registration in `inference/features.py`, the
encoder a saved router names). The small VLM's own prefill state is not an encoder here yet (docs/labelling.md).
"""
from .meaning import (DEFAULT_DIMS, PREFIX, MeaningFeatures, encoder_for_policy, is_meaning_feature, load_meaning,
                      meaning_name, register_meaning, unregister_meaning)
from .sentence import SentenceEncoder, build_tiny_sentence_encoder

__all__ = ["DEFAULT_DIMS", "PREFIX", "MeaningFeatures", "SentenceEncoder", "build_tiny_sentence_encoder",
           "encoder_for_policy", "is_meaning_feature", "load_meaning", "meaning_name", "register_meaning",
           "unregister_meaning"]
