"""A router type's own train-router settings: one dataclass per type, in its training unit (`<unit>/config.py`), named
by its registry entry's `config` (router/router_types.py), as peft registers a config class per method.

Each field is one flag, generated (`num_leaves` -> `--num-leaves`: type, default, and help from the field's
metadata; train_cli.py groups them by type); a class checks its values in `problems()` (a list of messages, so
TrainConfig reports every problem at once). The settings every type shares (target, delta, mode, splits, ...) are
TrainConfig's (config.py). Nothing here names a type: the registry says which types there are.
"""
from __future__ import annotations

from dataclasses import MISSING, field, fields, replace

from routedvlm.errors import ConfigError, RoutedVLMError, one_of


def setting(default, help: str, **kw):
    """A settings field: its default and help text (metadata `choices`, `aliases` and `conv`, a str -> value
    function, shape its flag)."""
    return field(default=default, metadata={"help": help, **kw})


class RouterSettings:
    """Base of a router type's settings dataclass: `problems()` lists what is wrong with the values (none here)."""

    def problems(self) -> list[str]:
        return []


def settings_classes() -> dict[str, type]:
    """{type name: its settings dataclass} for every registered type with a trainer and a `config`, registry order."""
    from routedvlm.router.router_types import ROUTER_TYPES

    out = {}
    for name, entry in ROUTER_TYPES.items():
        if entry.trainer and entry.config:
            try:
                out[name] = entry.config_class()
            except RoutedVLMError as exc:
                raise ConfigError(str(exc)) from None
    return out


def names_of(cls) -> list[str]:
    return [f.name for f in fields(cls)]


def build_settings(given: dict | None, flat: dict) -> dict:
    """{type name: settings instance} for every type: `given`'s instances (or the defaults), with the flat keyword
    settings `flat` (`num_leaves=31`) applied to every type that declares them. TypeError names an unknown one."""
    classes = settings_classes()
    known = {n for cls in classes.values() for n in names_of(cls)}
    unknown = sorted(set(flat) - known)
    if unknown:
        raise TypeError(f"TrainConfig got unexpected setting(s) {unknown}: neither a shared train-router setting nor "
                        f"a setting of a registered router type ({one_of(sorted(known))}).")
    out = dict(given or {})
    for name, cls in classes.items():
        mine = {k: v for k, v in flat.items() if k in names_of(cls)}
        base = out.get(name)
        out[name] = replace(base, **mine) if isinstance(base, cls) else cls(**mine) if base is None else base
    return out


def settings_problems(settings: dict) -> list[str]:
    """Every problem of every type's settings (a wrong class given for a type included)."""
    classes = settings_classes()
    out = []
    for name, value in settings.items():
        cls = classes.get(name)
        if cls is not None and not isinstance(value, cls):
            out.append(f"`settings[{name!r}]` must be a {cls.__name__}; got {type(value).__name__}")
        elif hasattr(value, "problems"):
            out += value.problems()
    return out


def declared_by(name: str, settings: dict) -> list:
    """The settings instances that declare a field `name`."""
    return [s for s in settings.values() if name in names_of(type(s))]


def default_of(f):
    return None if f.default is MISSING else f.default
