"""Which checkpoints a router was trained on, and whether the ones it is about to run are those.

`policy.checkpoints` records, per ladder alias, what the labels' metadata says of its model: `name` (the path as
given), `weights_hash` and `config_hash` (`router/checkpoints.py`). `identity_problems(policy, found)` compares that
with the hashes of the checkpoints being served (`found`: alias -> {'config_hash', 'weights_hash'} or None when the
side cannot be hashed here, e.g. a remote server); RoutedVLM refuses the router on any difference unless told to
allow it. A router that records nothing (trained before this was recorded) is accepted with a warning.
"""
from __future__ import annotations

KEYS = ("name", "weights_hash", "config_hash")


def checkpoints_of(models: dict | None, ladder) -> dict:
    """`policy.checkpoints` from the labels' metadata `models` (alias -> info), for the aliases of `ladder`."""
    out = {}
    for alias in ladder or ():
        info = (models or {}).get(alias)
        if not isinstance(info, dict):
            continue
        weights = info.get("weights_hash") or (info.get("revision") if str(info.get("revision") or "").startswith(
            "sha256:") else None)
        entry = {"name": info.get("name"), "weights_hash": weights, "config_hash": info.get("config_hash")}
        if entry["weights_hash"] or entry["config_hash"]:
            out[alias] = {k: (str(v) if v is not None else None) for k, v in entry.items()}
    return out


def checkpoint_problems(checkpoints, ladder) -> list[str]:
    """Problems of a policy's `checkpoints` field (empty when valid)."""
    if not isinstance(checkpoints, dict):
        return [f"`checkpoints` must be a dict {{alias: {{name, weights_hash, config_hash}}}}. Got "
                f"{type(checkpoints).__name__}."]
    out = []
    for alias, entry in checkpoints.items():
        if alias not in (ladder or ()):
            out.append(f"`checkpoints` names {alias!r}, which is not a model of the ladder {list(ladder or ())}.")
        elif not isinstance(entry, dict) or set(entry) - set(KEYS) or any(
                v is not None and not isinstance(v, str) for v in entry.values()):
            out.append(f"`checkpoints[{alias!r}]` must be a dict of {list(KEYS)} (strings or null). Got "
                       f"{str(entry)[:120]}.")
    return out


def identity_problems(checkpoints: dict, found: dict) -> list[str]:
    """One line per served checkpoint that differs from the recorded one (config or weights hash)."""
    out = []
    for alias, recorded in sorted(checkpoints.items()):
        now = found.get(alias)
        if now is None:
            continue
        for key in ("config_hash", "weights_hash"):
            want, got = recorded.get(key), now.get(key)
            if want and got and want != got:
                out.append(f"model {alias!r}: {key.split('_')[0]} {got[:19]}… differs from the {want[:19]}… of "
                           f"{recorded.get('name')!r} the router was trained on")
                break
    return out
