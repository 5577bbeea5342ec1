"""TrainConfig: the train-router settings every router type shares, one validated dataclass field per flag, plus
`settings`, each registered type's own settings dataclass (training/settings.py; the CLI is built from both).

`TrainConfig(num_leaves=31)` still works: a keyword that is a type's setting goes to every type that declares it, and
`config.num_leaves` reads it back (the flat view older scripts use); trainers read `config.settings[<their type>]`.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

from routedvlm.errors import ConfigError, one_of
from routedvlm.router.router_types import DEFAULT_TYPE, trainable, type_facts
from routedvlm.router.strategies import parse_strategy

from .settings import build_settings, declared_by, settings_problems

MODES = ("cascade", "one-shot")
MODE_CHOICES = ("auto", *MODES)  # auto: train-router picks the mode that can save on the labels (steps.resolve_mode)
RELATIVE_LOSSES = ("difference", "regret")  # training/calibration/certify.py's, for the --help without its imports
DIFFERENCE_TESTS = ("betting", "clopper-pearson")  # the first is the default
CHAIN_NAMES = ("tau", "lagrangian", "binary", "baselines")  # training/calibration/rule_family.CHAINS
DEFAULT_TARGET_ACCURACY = 0.95  # 0.98 needs ~1000+ calibration rows on the toy world (README, "Certified calibration")
DEFAULT_DELTA = 0.1


def _f(default, help: str, **kw):
    return field(default=default, metadata={"help": help, **kw})


def share(text: str) -> float | str:
    """--calib-fraction's value: 'auto' or a number."""
    import argparse

    if str(text).strip().lower() == "auto":
        return "auto"
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'auto' or a number in (0, 0.5), e.g. 0.3; got {text!r}") from None


def _csv(value) -> list[str] | None:
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else list(value)
    out = [str(i).strip() for i in items if str(i).strip()]
    return out or None


@dataclass
class TrainConfig:
    """What train-router does; one field per flag (`target_accuracy` -> `--target-accuracy`)."""

    data: str | None = _f(None, "labels.parquet to train on (default: the embedded toy labels, if installed)")
    router: str = _f(DEFAULT_TYPE, "router type to train (each type's own settings are listed under its name below)",
                     choices=trainable)
    mode: str = _f("auto", "cascade: large_direct runs first and its features are free; one-shot: prompt features "
                           "only; auto (the default): cascade when the candidates include a reasoning or transfer "
                           "strategy to escalate to, else one-shot (on direct-only labels, such as an imported "
                           "outcome table, a cascade would pay the strong model's answer first and save nothing); "
                           "the choice is logged and recorded in policy.json (params.mode_choice)",
                   choices=MODE_CHOICES)
    target_accuracy: float | None = _f(None, "accuracy target as a fraction of the best single strategy's (the "
                                             "candidate most accurate on the training rows), certified as "
                                             f"--relative-loss says (default {DEFAULT_TARGET_ACCURACY} when no other target is given)")
    relative_loss: str = _f("difference", "what --target-accuracy certifies: difference (the accuracy difference to "
                                          "the reference itself, +1 where it is right and the router wrong, -1 the "
                                          "other way round: exactly 'accuracy >= reference's - alpha') or regret "
                                          "(only the rows the reference gets right count: the stronger 'never worse "
                                          "than the reference on its rows but an alpha share', at some cost in savings)",
                            choices=RELATIVE_LOSSES)
    difference_test: str = _f("betting", "the p-value of --relative-loss difference: betting (Waudby-Smith-Ramdas, "
                                         "variance-adaptive; the default, by measurement: docs/training.md) or "
                                         "clopper-pearson (upper bound on the loss rows minus lower bound on the gain "
                                         "rows, delta/2 each)",
                              choices=DIFFERENCE_TESTS)
    min_accuracy: float | None = _f(None, "absolute accuracy target in (0, 1), certified as the error rate (instead "
                                          "of --target-accuracy)")
    max_latency_ms: float | None = _f(None, "mean realized latency budget in ms (instead of --target-accuracy; "
                                            "not certified)")
    delta: float = _f(DEFAULT_DELTA, "Learn-then-Test level: the accuracy target holds on new traffic from the same "
                                     "distribution with probability >= 1 - delta over the calibration rows")
    chains: list[str] | None = _f(None, "comma-separated rule chains to test: tau, lagrangian, binary, baselines "
                                        "(default all); delta is split over them (Bonferroni), so fewer chains test "
                                        "each at a larger level: on RouteLLM's GSM8K table the tau chain alone "
                                        "certified 11.1 percent strong-call savings against 9.7 with all "
                                        "(benchmarks/README.md); 'always the reference' stays as the fallback")
    strategies: list[str] | None = _f(None, "comma-separated candidate strategy ids (default: every strategy in the labels)")
    features: list[str] | None = _f(None, "comma-separated feature columns, stage names (prompt, large_direct, "
                                          "small_direct; on a ladder also mid_direct, ...) or prefixes ending in '*' "
                                          "(default: what the mode allows, without small_direct features; a ladder's "
                                          "cascade climbs: every direct answer below the most expensive model's)")
    with_small_direct: bool = _f(False, "cascade: also use the features that need small_direct (it then runs "
                                        "beside large_direct on every sample)")
    fallback: str | None = _f(None, "strategy used when no candidate reaches tau (default: large_reason if a "
                                    "candidate, else the most accurate candidate)")
    register_as: str = _f("vlm-router", "registered model name in the MLflow model registry")
    promote: bool = _f(False, "set the 'champion' alias even if the current champion is better")
    no_register: bool = _f(False, "log the run to MLflow but do not register the model")
    no_mlflow: bool = _f(False, "do not use MLflow at all (only write --output-dir)")
    no_pair_comparison: bool = _f(False, "on a ladder of three or more models, skip training and certifying the best "
                                         "policy of every two-model sub-pair (the evaluation rows `best pair a/b`)")
    tracking_uri: str | None = _f(None, "MLflow tracking URI (default: sqlite store in ./mlruns)")
    experiment: str = _f("train-router", "MLflow experiment name")
    output_dir: str | None = _f(None, "folder for router/, evaluation.json and curve.png (default runs/router-<timestamp>)")
    calib_fraction: float | str = _f(0.2, "share of rows for the calibration split, or auto: chosen among 0.2, 0.3 "
                                          "and 0.4 by simulating train-router on the rows that train under every "
                                          "one of them (never on calibration or test rows; lightgbm router; "
                                          "docs/training.md), recorded in policy.json (params.calibration_share)",
                                     aliases=("--calibration-share",), conv="share")
    calibration_data: str | None = _f(None, "labels.parquet whose rows are the calibration split instead (fresh rows, "
                                             "e.g. audited live traffic relabelled: routedvlm audit export + routedvlm "
                                             "label); the labels' own calibration share is then left unused")
    test_fraction: float = _f(0.2, "share of rows for the test split")
    strict_features: bool = _f(False, "refuse feature columns that are constant on the training rows (default: drop "
                                      "them with a warning naming them)")
    allow_constant_features: bool = _f(False, "kept so older commands still run: constant feature columns are dropped "
                                              "by default (see --strict-features)")
    allow_missing_features: bool = _f(False, "let LightGBM treat NaN feature values as missing instead of failing "
                                             "(infinite values always fail)")
    max_features: int = _f(256, "sanity limit on the number of feature columns a router trains on (more fail: "
                                "choose them with --features)")
    seed: int = _f(0, "seed for the split and LightGBM")
    settings: dict = _f(None, "each router type's own settings: {type name: its settings dataclass} (default: every "
                              "registered type's defaults, with the keyword settings given applied)", flag=False)

    def __post_init__(self):
        self.strategies = _csv(self.strategies)
        self.chains = _csv(self.chains)
        self.features = _csv(self.features)
        problems = []
        if self.router not in trainable():
            problems.append(f"`router` must be {one_of(trainable())}; got {self.router!r}")
        facts = type_facts(self.router)
        if facts.modes is not None and self.mode == "auto":
            self.mode = facts.modes[0]
        if facts.modes is not None and self.mode not in facts.modes:
            problems.append(f"{facts.modes_why}; got {self.mode!r}")
        bad_chains = [c for c in self.chains or () if c not in CHAIN_NAMES]
        if bad_chains:
            problems.append(f"`chains` must name some of {one_of(CHAIN_NAMES)}; got {bad_chains}")
        if self.relative_loss not in RELATIVE_LOSSES:
            problems.append(f"`relative_loss` must be {one_of(RELATIVE_LOSSES)}; got {self.relative_loss!r}")
        if self.difference_test not in DIFFERENCE_TESTS:
            problems.append(f"`difference_test` must be {one_of(DIFFERENCE_TESTS)}; got {self.difference_test!r}")
        if self.mode not in MODE_CHOICES:
            problems.append(f"`mode` must be {one_of(MODE_CHOICES)}; got {self.mode!r}")
        given = [n for n in ("target_accuracy", "min_accuracy", "max_latency_ms") if getattr(self, n) is not None]
        if len(given) > 1:
            problems.append(f"give exactly one of `target_accuracy`, `min_accuracy` and `max_latency_ms`; got {given}")
        if not given:
            self.target_accuracy = DEFAULT_TARGET_ACCURACY
        if self.target_accuracy is not None and not 0.0 < self.target_accuracy < 1.0:
            problems.append(f"`target_accuracy` must be in (0, 1) (1.0 leaves no room: use --strategies large_reason "
                            f"to always reason); got {self.target_accuracy!r}")
        if self.min_accuracy is not None and not 0.0 < self.min_accuracy < 1.0:
            problems.append(f"`min_accuracy` must be in (0, 1); got {self.min_accuracy!r}")
        if not (isinstance(self.delta, (int, float)) and 0.0 < self.delta < 1.0):
            problems.append(f"`delta` must be in (0, 1); got {self.delta!r}")
        if self.max_latency_ms is not None and not self.max_latency_ms > 0:
            problems.append(f"`max_latency_ms` must be > 0; got {self.max_latency_ms!r}")
        if isinstance(self.calib_fraction, str) and self.calib_fraction.strip().lower() == "auto":
            self.calib_fraction = "auto"
        for name in ("calib_fraction", "test_fraction"):
            value = getattr(self, name)
            if value == "auto" and name == "calib_fraction":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value < 0.5:
                what = " or 'auto'" if name == "calib_fraction" else ""
                problems.append(f"`{name}` must be in (0, 0.5){what}; got {value!r}")
        if not self.max_features >= 1:
            problems.append(f"`max_features` must be a positive integer; got {self.max_features!r}")
        problems += settings_problems(self.settings)
        if not self.register_as or not self.register_as.strip():
            problems.append("`register_as` must be a non-empty model name")
        for s in [*(self.strategies or []), *([self.fallback] if self.fallback else [])]:
            try:
                parse_strategy(s)
            except ConfigError as exc:
                problems.append(f"`strategies`/`fallback`: {exc}")
        if self.strategies is not None and len(set(self.strategies)) < 2:
            problems.append(f"`strategies` must name at least two different strategies; got {self.strategies}")
        if problems:
            raise ConfigError("Invalid train-router configuration: " + "; ".join(problems) + ".")

    @property
    def target(self) -> dict:
        """The policy target: {"kind": "accuracy"|"min_accuracy"|"latency_ms", "value": x}; an accuracy target also
        names its certified `loss` (and the difference's `test`)."""
        if self.max_latency_ms is not None:
            return {"kind": "latency_ms", "value": float(self.max_latency_ms)}
        if self.min_accuracy is not None:
            return {"kind": "min_accuracy", "value": float(self.min_accuracy)}
        out = {"kind": "accuracy", "value": float(self.target_accuracy), "loss": self.relative_loss}
        return {**out, "test": self.difference_test} if self.relative_loss == "difference" else out

    def to_dict(self) -> dict:
        """Every setting by its flag's name, flat (MLflow's `train.<name>` params): the shared ones, then each type's."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "settings"}
        for value in self.settings.values():
            out.update({f.name: getattr(value, f.name) for f in fields(value) if f.name not in out})
        return out

    def __getattr__(self, name: str):
        """The flat view: `config.num_leaves` is the setting of the type(s) that declare it."""
        if name.startswith("__") or name == "settings":
            raise AttributeError(name)
        owners = declared_by(name, self.__dict__.get("settings") or {})
        if not owners:
            raise AttributeError(f"'TrainConfig' object has no attribute {name!r}")
        return getattr(owners[0], name)

    def __setattr__(self, name: str, value) -> None:
        owners = [] if name in _SHARED else declared_by(name, self.__dict__.get("settings") or {})
        for owner in owners:
            setattr(owner, name, value)
        if not owners:
            object.__setattr__(self, name, value)


_SHARED = frozenset(f.name for f in fields(TrainConfig))


def _taking_type_settings(cls):
    """Let TrainConfig(...) take a type's settings as keywords too (`num_leaves=31`), as every flag is one keyword."""
    generated = cls.__init__

    def __init__(self, *args, settings: dict | None = None, **kwargs):
        flat = {k: kwargs.pop(k) for k in [k for k in kwargs if k not in _SHARED]}
        generated(self, *args, settings=build_settings(settings, flat), **kwargs)

    __init__.__doc__ = generated.__doc__
    cls.__init__ = __init__
    return cls


_taking_type_settings(TrainConfig)
