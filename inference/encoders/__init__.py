"""Prompt encoders: what a request means, as features (`feat__prompt__meaning_<i>`), computed by the same code in the
labeller, the outcome importer and RoutedVLM. A sentence encoder from a folder or hub id (`feat__prompt__meaning_<i>`),
and the small VLM's own state during its small_direct pass (`feat__small_direct__state_<i>`, state.py; docs/labelling.md).
"""
from .meaning import (DEFAULT_DIMS, PREFIX, MeaningFeatures, encoder_for_policy, is_meaning_feature, load_meaning,
                      meaning_name, register_meaning, unregister_meaning)
from .sentence import SentenceEncoder, build_tiny_sentence_encoder

__all__ = ["DEFAULT_DIMS", "PREFIX", "MeaningFeatures", "SentenceEncoder", "build_tiny_sentence_encoder",
           "encoder_for_policy", "is_meaning_feature", "load_meaning", "meaning_name", "register_meaning",
           "unregister_meaning"]
