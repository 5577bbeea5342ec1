"""The spec table: which kind of side a spec names, how it is loaded, and what that kind declares.

Every question "what kind of side is this spec?" is answered here, from one table (`KINDS`), never by matching a
spec's text elsewhere: the labeller asks whether every side batches (`every_side(specs, "batching")`), the profiler
whether a model is remote, the self-probe whether the large side is an in-process engine. A spec is text
(a checkpoint folder or hub id, '<base_url>#<model id>', 'vllm:<folder>'); a side object answers for itself
(`ModelSide.stateful`, `returns_hidden_states`, ...). `check_spec(spec)` refuses a spec whose kind needs a package
that is not installed (vLLM), naming the install step, before any work starts.

Adding a kind: its folder (or module) with a `load(target, reasoner=..., **kwargs)` function, and one `SideKind` line
in `KINDS` (before the local kind, which takes every spec no other kind claims).
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass

from routedvlm.errors import ConfigError

from .http.remote import URL_PREFIXES, parse_remote


@dataclass(frozen=True)
class SideKind:
    """One kind of model side and what every side of it does (the spec table's row)."""

    name: str  #: short name, as the docs and `describe()["kind"]` spell it
    form: str  #: how a spec of this kind is written (for help texts and errors)
    loader: str  #: 'module:function' (relative to routedvlm.inference.sides): load(target, reasoner=..., **kwargs)
    prefix: tuple = ()  #: a spec starting with one of these is of this kind (the local kind: every other spec)
    strip_prefix: bool = False  #: the prefix only names the kind ('vllm:'): the loader takes what follows it
    stateful: bool = True  #: holds per-call state: calls are serialised, samples take turns (ModelSide.stateful)
    batching: bool = False  #: takes many requests at once (many samples in flight share its batches)
    remote: bool = False  #: runs outside this process (nothing of the model is loaded here)
    hidden_states: bool = False  #: can return decoder hidden states (the self-probe); engines: for some checkpoints
    prices_from_token_ids: bool = False  #: counts from token ids what an escalation reuses (no measuring requests)
    needs_gpu: bool = False  #: cannot run without a GPU
    requires: tuple = ()  #: importable packages the kind needs in this process
    install: str = ""  #: how to get them (said when one is missing)
    runtime: str = ""  #: what computes the model's outputs, as recorded (e.g. the self-probe's `recomputed.side`)
    described_by: tuple = ()  #: (key, value) of `describe()` that marks a recorded side as this kind

    def matches(self, spec) -> bool:
        return bool(self.prefix) and isinstance(spec, str) and spec.startswith(self.prefix)

    def target(self, spec) -> str:
        """What the kind's loader takes: the spec without a prefix that only names the kind ('vllm:<folder>' ->
        '<folder>'); a URL spec is its own target."""
        text = str(spec)
        if self.strip_prefix:
            for prefix in self.prefix:
                if text.startswith(prefix):
                    return text[len(prefix):]
        return text

    def spec(self, target) -> str:
        """The spec naming `target` as this kind (the inverse of `target`)."""
        return f"{self.prefix[0]}{target}" if self.strip_prefix else str(target)

    def missing(self) -> list:
        """The required packages that cannot be imported here (a module set to None in sys.modules counts as
        missing, as `import` treats it)."""
        out = []
        for name in self.requires:
            loaded = sys.modules.get(name, False)
            if loaded is None or (loaded is False and importlib.util.find_spec(name) is None):
                out.append(name)
        return out

    def load(self, spec, *, reasoner=None, **kwargs):
        module, _, fn = self.loader.partition(":")
        return getattr(importlib.import_module(module, __package__), fn)(self.target(spec), reasoner=reasoner, **kwargs)


KINDS = (
    SideKind("http", "a model on an OpenAI-compatible server ('<base_url>#<model id>')", ".http:load",
             prefix=URL_PREFIXES, stateful=False, batching=True, remote=True, runtime="openai-http",
             described_by=(("device", "remote"),)),
    SideKind("vllm", "an in-process vLLM engine ('vllm:<checkpoint folder>')", ".vllm:load", prefix=("vllm:",),
             strip_prefix=True, stateful=False, batching=True, hidden_states=True, prices_from_token_ids=True,
             requires=("vllm",),             install="`make vllm-env`, then run with .venv-vllm/bin/python (or `pip install vllm`)",
             runtime="vllm-engine", described_by=(("engine", "vllm"),)),
    SideKind("local", "a checkpoint folder or hub id (transformers in this process)", ".local:load",
             hidden_states=True, runtime="transformers"),
)
LOCAL = KINDS[-1]


def side_kind(spec) -> SideKind:
    """The kind of a spec (text or path); a side object's kind is the one whose loader built it."""
    if not isinstance(spec, (str, os.PathLike)):
        return next((k for k in KINDS if getattr(spec, "kind", None) == k.name), LOCAL)
    return next((k for k in KINDS[:-1] if k.matches(str(spec))), LOCAL)


def described_kind(description: dict) -> SideKind:
    """The kind of a side recorded by its `describe()` (e.g. the labels metadata's `models[alias]`)."""
    description = description or {}
    for kind in KINDS[:-1]:
        if any(description.get(k) == v for k, v in kind.described_by) or description.get("kind") == kind.name:
            return kind
    if description.get("server"):
        return KINDS[0]
    return LOCAL


def check_spec(spec, what: str = "model") -> SideKind:
    """The kind of `spec`, once its form is valid and what the kind needs is installed; ConfigError otherwise (before
    any model loads). `what` names the setting in the error."""
    kind = side_kind(spec)
    if not isinstance(spec, (str, os.PathLike)):
        return kind
    if kind.remote:
        parse_remote(str(spec))  # a URL without '#<model id>' is refused here
    missing = kind.missing()
    if missing:
        raise ConfigError(f"The {what} {str(spec)!r} is {kind.form}, which needs {', '.join(missing)}: not installed in "
                          f"this environment. Install it ({kind.install}), or give the {what} as {LOCAL.form}.")
    return kind


def every_side(specs, capability: str) -> bool:
    """Whether every spec (or side object) in `specs` has `capability` (a `SideKind` field: "batching", "remote",
    "stateful", ...); a side object answers for itself when it sets that attribute."""
    out = []
    for spec in specs:
        if not isinstance(spec, (str, os.PathLike)) and hasattr(spec, capability):
            out.append(bool(getattr(spec, capability)))
        else:
            out.append(bool(getattr(side_kind(spec), capability)))
    return all(out)


def load_spec(spec, *, reasoner=None, **kwargs):
    """The side a spec names, loaded by its kind's loader."""
    return side_kind(spec).load(spec, reasoner=reasoner, **kwargs)
