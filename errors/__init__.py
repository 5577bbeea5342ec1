"""The project's error hierarchy: one base, and subclasses that also inherit the matching builtin.

Every package imports its errors from here; this package imports nothing of routedvlm. Messages name the field, what it must be, what was given, and the next step.
"""
from __future__ import annotations


class RoutedVLMError(Exception):
    """Base of every error routedvlm raises on purpose."""


class ConfigError(RoutedVLMError, ValueError):
    """A parameter, flag or config field has an invalid value."""


class UnknownStrategyError(ConfigError):
    """A strategy id is not in the closed set of DESIGN.md."""


class InputError(RoutedVLMError, ValueError):
    """A request's input (image, question, messages, keep_tokens) is unusable."""


class ImageLoadError(InputError):
    """An image file is missing or cannot be decoded."""


class ModelLoadError(RoutedVLMError, OSError):
    """A checkpoint folder or hub id cannot be loaded as a vision-language model."""


class ModeUnavailableError(RoutedVLMError, ValueError):
    """A strategy needs a mode (direct or reasoning) that a model side cannot provide."""


class LabelsError(RoutedVLMError, ValueError):
    """A labels file does not follow the labels.parquet schema (DESIGN.md)."""


class DatasetError(RoutedVLMError, ValueError):
    """A data set cannot be found or does not have the columns its adapter needs."""


class RouterError(RoutedVLMError, ValueError):
    """A router artifact is missing, corrupt, or cannot make a decision."""


class RouterLoadError(RouterError):
    """A router artifact cannot be loaded: missing or damaged files, a digest mismatch, a path outside its folder."""


class TrackingStoreError(RoutedVLMError, OSError):
    """The MLflow tracking/registry store cannot be created, opened or written."""


class TrainingError(RoutedVLMError, ValueError):
    """train-router cannot train on the given labels (too few rows, no correct label...)."""


class InsufficientMemoryError(RoutedVLMError, MemoryError):
    """A model would not fit in the free memory of its device; refused before anything is allocated."""


class BackendError(RoutedVLMError, RuntimeError):
    """A model backend (e.g. an OpenAI-compatible server) failed to answer a request."""


class SideUnavailableError(BackendError):
    """A model server did not answer after its retries (connection errors, timeouts, 5xx): an outage of that side,
    not a failure of the request; a labelling run stops on it instead of recording the sample as failed."""


class OutputLockedError(RoutedVLMError, RuntimeError):
    """Another live run holds the lock on an output (labelling)."""


class StorageError(RoutedVLMError, OSError):
    """A file cannot be written (read-only folder, disk full); what was stored before is kept."""


def one_of(options) -> str:
    """Render valid options sorted, for error messages: `'a', 'b' or 'c'`."""
    opts = sorted(str(o) for o in options)
    quoted = [repr(o) for o in opts]
    if len(quoted) <= 1:
        return "".join(quoted)
    return ", ".join(quoted[:-1]) + " or " + quoted[-1]
