"""Prompt encoders: what a request means, as features (`feat__prompt__meaning_<i>`), computed by the same code in the
labeller, the outcome importer and RoutedVLM. A sentence encoder from a folder or hub id is the one kind today; the
small VLM's own prefill state is not yet (docs/labelling.md, "Meaning features"; files: docs/layout.md).
"""
from .meaning import (DEFAULT_DIMS, PREFIX, MeaningFeatures, encoder_for_policy, is_meaning_feature, load_meaning,
                      meaning_name, register_meaning, unregister_meaning)
from .sentence import SentenceEncoder, build_tiny_sentence_encoder

__all__ = ["DEFAULT_DIMS", "PREFIX", "MeaningFeatures", "SentenceEncoder", "build_tiny_sentence_encoder",
           "encoder_for_policy", "is_meaning_feature", "load_meaning", "meaning_name", "register_meaning",
           "unregister_meaning"]
