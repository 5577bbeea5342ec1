"""The demo's router choice: train every router type named (default: the types the registry marks `demo_default`,
LightGBM; with --full or --quick those it marks `in_demo`, LightGBM and the LoRA probe) in both modes on the demo labels, log and register them all, and promote the one with the best
certified utility to `champion`.

Each router is certified at delta / (number of routers) (`delta_each`); the champion is chosen among them, so what
holds for it is delta (a union bound over the routers): every certificate is restated at `delta_after_selection` =
delta before it is logged (training/calibration/selection.py), and policy.json, MLflow and the table say so.
Certified utility: the router's test utility (training/evaluate.py) when its calibration was feasible and it met its
target on the test rows, else -inf (an uncertified router, or one that missed its test target, never becomes champion).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from routedvlm.errors import ConfigError, RouterError, one_of
from routedvlm.router.router_types import type_facts, with_fact

DEFAULT_ROUTERS = ",".join(with_fact("demo_default"))  # the default run, minutes: LightGBM
FULL_ROUTERS = ",".join(with_fact("in_demo"))  # --full and --quick: LightGBM and the LoRA probe
MODES = (("cascade", True), ("one-shot", False))  # (mode, with_small_direct): for a type sharing small_direct's prefill


def parse_routers(text: str) -> list[str]:
    """'a,b' -> ['a', 'b'], router types the registry marks `in_demo` (ConfigError for other names)."""
    names = [t.strip() for t in str(text).split(",") if t.strip()]
    bad = [n for n in names if n not in with_fact("in_demo")]
    if bad or not names:
        raise ConfigError(f"The `routers` setting must list router types from {one_of(with_fact('in_demo'))}, "
                          "comma-separated. "
                          f"Got {text!r} instead.")
    return list(dict.fromkeys(names))


@dataclass
class Trained:
    """One trained router: its name ('lightgbm cascade', ...), config, TrainResult and registration."""

    name: str
    config: object
    result: object
    info: dict = field(default_factory=dict)

    @property
    def feasible(self) -> bool:
        return bool(self.result.evaluation["certificate"]["feasible"])

    @property
    def certified_utility(self) -> float:
        ok = self.feasible and bool(self.result.evaluation.get("target_met_test", True))
        return float(self.result.evaluation["utility"]) if ok else -math.inf


def train_all(cfg, labels_path: Path, say) -> list[Trained]:
    """Train each router type of `cfg.routers` in both modes; MLflow is left to `register_all`."""
    from ..config import TrainConfig
    from ..labels_io import load_labels
    from ..pipeline import train_router

    kinds = parse_routers(cfg.routers)
    labels, metadata = load_labels(str(labels_path))
    n = len(kinds) * len(MODES)
    out = []
    for kind in kinds:
        for mode, with_small in MODES:
            name = f"{kind} {mode}"
            tc = TrainConfig(data=str(labels_path), router=kind, mode=mode,
                             with_small_direct=with_small and type_facts(kind).small_prefill,
                             output_dir=str(Path(cfg.out) / "train" / name.replace(" ", "-")),
                             tracking_uri=cfg.tracking_uri, register_as=cfg.register_as, experiment="routedvlm-demo",
                             seed=cfg.seed, target_accuracy=cfg.target_accuracy,
                             min_accuracy=cfg.min_accuracy, delta=cfg.delta / n,
                             calib_fraction=cfg.split_share, test_fraction=cfg.split_share)
            result = train_router(tc, labels, metadata)
            t = Trained(name, tc, result)
            ev = result.evaluation
            say(f"{name}: {ev['certificate']['chosen']}, on its test split {ev['rows'][-1]['verdict']} "
                f"({'certified' if t.feasible else 'NOT certified'} at delta {tc.delta:g})")
            out.append(t)
    return out


def register_all(trained: list[Trained], labels_path: Path, say) -> Trained:
    """Log and register every router; the best certified utility is promoted to champion last. RouterError when
    none is certified (no champion)."""
    from dataclasses import replace

    from ..labels_io import load_labels
    from ..tracking import track

    best = max(trained, key=lambda t: t.certified_utility)
    if best.certified_utility == -math.inf:
        raise RouterError("No router certified the target and met it on its test rows: "
                          + trained[0].result.evaluation["certificate"]["statement"]
                          + " Use a lower --target-accuracy or more --n-label samples.")
    from ..calibration.selection import restate_result

    labels, _ = load_labels(str(labels_path))
    total = sum(float(t.config.delta) for t in trained)
    for t in trained:  # the level that holds for the champion after the choice, in every artifact
        restate_result(t.result, total, len(trained), f"demo champion: chosen among {len(trained)} routers certified "
                       f"on the same calibration rows, each at delta {trained[0].config.delta:.4g}")
    for t in [t for t in trained if t is not best] + [best]:
        t.info = track(replace(t.config, promote=t is best), t.result, labels)
        say(f"registered {t.name} as {t.info['registered_as']} version {t.info['version']}: "
            f"{'champion' if t.info['champion'] else 'not champion'} ({t.info['champion_reason']})")
    return best


def summary_rows(trained: list[Trained]) -> str:
    """One line per router: chosen rule, its test verdict, certified utility."""
    lines = []
    for t in trained:
        ev = t.result.evaluation
        u = t.certified_utility
        lines.append(f"  {t.name:<20} {ev['certificate']['chosen']:<46} test: {ev['rows'][-1]['verdict']:<28} "
                     f"certified utility {'-' if u == -math.inf else f'{u:.2f}'}")
    return "\n".join(lines)


def binary_router(trained: list, best):
    """(router, its Trained) for the binary accept-or-reason rule at its certified threshold, on the P(large_direct)
    of a router that reads features only (a LightGBM router; cascade first: no second probe on RoutedVLM's small
    model), else the champion's; (None, None) when no router certified one."""
    import copy

    from routedvlm.router.policy import Policy

    for t in sorted(trained, key=lambda t: (bool(type_facts(t.config.router).inputs), t is not best, t.name)):
        member = t.result.evaluation["calibration"]["best_per_chain"].get("binary")
        if member:
            router = copy.copy(t.result.router)
            router.policy = Policy.from_dict({**t.result.router.policy.to_dict(), "rule": member["rule"],
                                              "mode": member["mode"], "paid_stages": member["paid_stages"],
                                              "certificate": {}})
            return router, t
    return None, None
