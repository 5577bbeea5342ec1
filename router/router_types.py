"""The one registry of router types: name → unit (runtime class, trainer, artifact files, contract).

A saved router names its type in policy.json (`router_type`); loading, `train_router(config)`, the demo and the
benchmarks all look the type up here. Entries are "module:attribute" strings, imported on use, so a LightGBM router
never imports torch and `routedvlm.router` imports no other routedvlm package: a trainer lives in
`routedvlm.training` (it needs the labels, the split, the certification and, for the probes, the data package to
reload the samples), and only `routedvlm.training` resolves it; so does its `config`, the dataclass of its own
train-router settings (one flag per field, generated: training/settings.py). Adding a router type: a folder under
`router/` (runtime), a folder under `training/` (trainer + config), and one line here (or one `register_router_type`
call, for a type that lives outside routedvlm). Nothing else spells a type's name: callers ask these entries.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

from routedvlm.errors import RouterLoadError, one_of


@dataclass(frozen=True)
class RouterType:
    """One router type. `runtime`: its Router subclass; `trainer`: `train(config, labels, metadata) -> TrainResult`
    in routedvlm.training, None for a rule with nothing to learn; `files`: the model files of its artifact. Its facts,
    which nothing outside the registry spells by type name: `requirements` (pip packages a served model needs beyond
    BASE_REQUIREMENTS), `inputs` (runtime input columns beyond the feature columns, strings), `code` (routedvlm
    packages its logged code needs beyond errors and router), `calibration_data` (takes fresh calibration rows,
    `--calibration-data`), `chooses_share` (its trainer chooses `--calib-fraction auto` by simulating the split; every
    other type takes the default share), `modes` (the training modes it supports, None: all) with `modes_why`,
    `config` (its settings dataclass, "module:attribute" in routedvlm.training; None: no settings of its own),
    `small_prefill` (it reads the small VLM's direct-mode prefill, so a cascade's small_direct features cost it no
    extra pass), `in_demo` (`routedvlm demo --full` and `--quick` train it), `demo_default` (the default `routedvlm
    demo`, a run of minutes, trains it).
    `learned`: it has a trainer (a rule router learns nothing and reads no checkpoints)."""

    name: str
    runtime: str
    trainer: str | None
    files: str
    config: str | None = None
    requirements: tuple = ()
    inputs: tuple = ()
    code: tuple = ()
    calibration_data: bool = False
    chooses_share: bool = False
    modes: tuple | None = None
    modes_why: str = ""
    small_prefill: bool = False
    in_demo: bool = False
    demo_default: bool = False

    def router_class(self):
        """The Router subclass (imported now); RouterLoadError when its dependencies are missing."""
        return _resolve(self.runtime, f"Router type {self.name!r}")

    def config_class(self):
        """Its settings dataclass (imported now), or None when it declares none."""
        return _resolve(self.config, f"The settings of router type {self.name!r}") if self.config else None

    @property
    def learned(self) -> bool:
        """Whether a router of this type is trained (has model files read from checkpoints), not a fixed rule."""
        return self.trainer is not None


ROUTER_TYPES: dict[str, RouterType] = {t.name: t for t in (
    RouterType("lightgbm", "routedvlm.router.lightgbm:LightGBMRouter", "routedvlm.training.lightgbm.trainer:train_lightgbm",
               "model_<strategy>.txt (LightGBM text models)", "routedvlm.training.lightgbm.config:LightGBMConfig",
               calibration_data=True, chooses_share=True, in_demo=True, demo_default=True),
    RouterType("lora-probe", "routedvlm.router.lora_probe:LoRAProbeRouter", "routedvlm.training.probe.lora_probe:train_probe",
               "adapter/ (peft LoRA), head.safetensors", "routedvlm.training.probe.config:LoRAProbeConfig",
               requirements=("torch", "transformers", "peft", "safetensors", "pillow", "tokenizers"),
               inputs=("question", "image"), code=("inference",), small_prefill=True, in_demo=True),
    RouterType("self-probe", "routedvlm.router.self_probe:SelfProbeRouter", "routedvlm.training.probe.self_probe:train_self_probe",
               "head.safetensors", "routedvlm.training.probe.config:SelfProbeConfig", modes=("cascade",),
               modes_why="the self-probe reads the large_direct pass, which only `mode` 'cascade' pays first"),
    RouterType("knn", "routedvlm.router.knn:KNNRouter", "routedvlm.training.knn.trainer:train_knn", "bank.safetensors",
               "routedvlm.training.knn.config:KNNConfig"),
    RouterType("mutual-verification", "routedvlm.router.baselines:MutualVerificationRouter", None, "none"),
    RouterType("fixed", "routedvlm.router.baselines:FixedRouter", None, "none"),
)}
DEFAULT_TYPE = "lightgbm"  # what train-router trains without --router
BASE_REQUIREMENTS = ("mlflow-skinny", "lightgbm", "pandas", "numpy")  # pinned for every logged router (mlflow_model.py)


def register_router_type(entry: RouterType) -> RouterType:
    """Add a router type to the registry (a type living outside routedvlm; the built-in ones are the table above).
    RouterLoadError when the name is taken."""
    if not isinstance(entry, RouterType):
        raise RouterLoadError(f"register_router_type takes a RouterType; got {type(entry).__name__}.")
    if entry.name in ROUTER_TYPES:
        raise RouterLoadError(f"Router type {entry.name!r} is already registered; choose another name.")
    ROUTER_TYPES[entry.name] = entry
    return entry


def trainable() -> tuple[str, ...]:
    """The names of the registered types with a trainer, sorted (what `--router` accepts)."""
    return tuple(sorted(n for n, t in ROUTER_TYPES.items() if t.trainer))


def with_fact(fact: str) -> list[str]:
    """The names of the registered types whose `fact` is true, in registry order (for messages)."""
    return [n for n, t in ROUTER_TYPES.items() if getattr(t, fact)]


def router_type(name: str) -> RouterType:
    """The registered type `name` (RouterLoadError listing the valid names)."""
    if name not in ROUTER_TYPES:
        raise RouterLoadError(f"Unknown router_type {name!r}; valid types are {one_of(ROUTER_TYPES)}.")
    return ROUTER_TYPES[name]


def type_facts(name) -> RouterType:
    """The registered type `name`'s entry, or an entry declaring no facts for a name that is not registered (a
    policy of an unknown type is refused where it is loaded, not here)."""
    return ROUTER_TYPES.get(name) or RouterType(str(name), "", None, "")


def is_rule(name) -> bool:
    """Whether `name` is a registered type with nothing to learn (a fixed rule: no trainer, no checkpoints read); an
    unregistered name is not."""
    entry = ROUTER_TYPES.get(name)
    return entry is not None and not entry.learned


def router_class(name: str):
    """The Router subclass registered for `name`."""
    return router_type(name).router_class()


def _resolve(target: str, what: str):
    module, _, attr = target.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except ImportError as exc:
        raise RouterLoadError(f"{what} needs {module}, which cannot be imported ({exc}). "
                              "Install the dependencies of that router type.") from None
