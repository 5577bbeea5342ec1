"""The content of a router's `policy.json`: candidates, costs, features, decision rule, fallback, target and its
certificate, provenance.

Validated on construction (every bad field named at once); `save`/`load` read and write the JSON file.
A file written by a newer routedvlm (higher `format_version`) is refused with a clear RouterError.
Format version 2 adds `model_sha256` (required for every model file the router names, see integrity.py), the
decision `rule` (decision_rules.py) and its `certificate`; version-1 files keep loading (as the tau-rule at `tau`).
`prompt_template` (optional) is the labels' prompt template; RoutedVLM applies it.
Format version 3 adds `ladder`: the model aliases the router's strategies run on (`router/strategies.py`
`ladder_aliases`, cheapest first); version 1 and 2 files read as the pair ('small', 'large'). On a pair `paid_stages`
keeps its two shapes ([large_direct] or [large_direct, small_direct]); on a ladder of more than two models a cascade
pays any distinct `<m>_direct` stages of the ladder, cheapest first (it climbs the ladder; router/ladder.py).
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from routedvlm.errors import RouterError, RouterLoadError, UnknownStrategyError, one_of
from .provenance import now_iso
from .certificate_fields import certificate_field_problems
from .checkpoint_identity import checkpoint_problems
from .decision_rules import rule_features, rule_problems, rule_stages, uses_model
from .ladder import PAIR as _PAIR, ladder_problems, off_ladder_problems, paid_stage_problems
from .strategies import LARGE_DIRECT, SMALL_DIRECT, feature_stages, is_strategy, parse_strategy

FORMAT_VERSION = 3
PAIR = list(_PAIR)
POLICY_FILE = "policy.json"
MAX_POLICY_BYTES = 64 << 20  # a policy.json beyond this is not one train-router wrote
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
MODES = ("cascade", "one-shot")
PAID_STAGES = ((), (LARGE_DIRECT,), (LARGE_DIRECT, SMALL_DIRECT))
TARGET_KINDS = ("accuracy", "latency_ms", "min_accuracy")
CERTIFICATE_KEYS = ("bound", "delta", "method", "n")
MAX_CALIBRATION_ROWS = 10**8  # far above any labels set (labels reading stops at 2e6 rows by default)
PROMPT_TEMPLATES = ("custom", "lmms-eval", "none")  # routedvlm.inference.prompts.TEMPLATE_NAMES


def _meta(help_text: str) -> dict:
    return {"help": help_text}


@dataclass(kw_only=True)
class Policy:
    """A routing policy; the router's model files are described in `params`."""

    router_type: str = field(metadata=_meta("router type: a name in the registry of router types (router_types.py)"))
    strategies: list[str] = field(metadata=_meta("candidate strategy ids, the columns of P(correct)"))
    format_version: int = field(default=FORMAT_VERSION, metadata=_meta("policy.json format version"))
    ladder: list[str] | None = field(default=None, metadata=_meta(
        "the model aliases of the ladder the strategies run on, cheapest first (format 3); None: the pair "
        "['small', 'large'] (files of format 1 and 2)"))
    mode: str = field(default="cascade", metadata=_meta("'cascade' (large_direct runs first) or 'one-shot'"))
    expected_cost_ms: dict[str, float] = field(
        default_factory=dict, metadata=_meta("mean incremental cost (ms) per strategy on the training split")
    )
    paid_stages: list[str] = field(default_factory=list, metadata=_meta("stages run before deciding"))
    features: list[str] = field(default_factory=list, metadata=_meta("feature columns, in model order"))
    tau: float = field(default=0.5, metadata=_meta("P(correct) threshold of the tau-rule (its `param`)"))
    rule: dict = field(default_factory=dict, metadata=_meta(
        "decision rule {'name': 'tau'|'lagrangian'|'binary'|'mutual-verification'|'fixed', 'param': x, ...}; "
        "empty: the tau-rule at `tau` (router/decision_rules.py)"))
    fallback: str = field(default="large_reason", metadata=_meta("strategy taken when no candidate reaches tau"))
    target: dict = field(default_factory=dict, metadata=_meta(
        "{'kind': 'accuracy' (a fraction of the best strategy's) | 'min_accuracy' | 'latency_ms', 'value': x}"))
    certificate: dict = field(default_factory=dict, metadata=_meta(
        "how the rule was calibrated: delta, n (calibration rows), bound, method, ... (training/calibration/certify.py)"))
    training_data_hash: str = field(default="", metadata=_meta("content hash of the labels trained on"))
    prompt_template: dict | None = field(default=None, metadata=_meta(
        "the prompt template the labels were made with (name, text, instructions); RoutedVLM applies it to each "
        "question. None: questions go to the models as given"))
    metrics: dict = field(default_factory=dict, metadata=_meta("evaluation metrics"))
    params: dict = field(default_factory=dict, metadata=_meta("router-type-specific parameters and model files"))
    model_sha256: dict[str, str] = field(
        default_factory=dict, metadata=_meta("{model file path relative to the router folder: sha256 hex digest}")
    )
    checkpoints: dict = field(default_factory=dict, metadata=_meta(
        "the checkpoints the router was trained on, by ladder alias: {name, weights_hash, config_hash} from the labels' "
        "metadata (router/checkpoint_identity.py); empty: not recorded"))
    created_at: str = field(default_factory=now_iso, metadata=_meta("ISO 8601 UTC creation time"))

    def __post_init__(self):
        self.strategies = list(self.strategies)
        self.paid_stages = list(self.paid_stages)
        self.features = list(self.features)
        if self.ladder is None:
            self.ladder = list(PAIR)
        elif isinstance(self.ladder, (list, tuple)):
            self.ladder = list(self.ladder)
        self.expected_cost_ms = {str(k): v for k, v in dict(self.expected_cost_ms).items()}
        if isinstance(self.rule, dict) and (not self.rule or self.rule.get("name") == "tau"):
            if self.rule and isinstance(self.rule.get("param"), (int, float)):
                self.tau = self.rule["param"]  # the tau-rule's parameter lives in `tau`
            self.rule = {"name": "tau", **{k: v for k, v in self.rule.items() if k != "param"}}
        problems = self.problems()
        if problems:
            raise RouterError("Invalid policy:\n  - " + "\n  - ".join(problems))
        self.expected_cost_ms = {k: float(v) for k, v in self.expected_cost_ms.items()}
        self.tau = float(self.tau)

    def problems(self) -> list[str]:
        """Every problem of this policy, one message each (empty when valid)."""
        out = []
        if not isinstance(self.format_version, int) or self.format_version < 1:
            out.append(f"`format_version` must be a positive integer. Got {self.format_version!r}.")
        if not isinstance(self.router_type, str) or not self.router_type:
            out.append(f"`router_type` must be a non-empty string. Got {self.router_type!r}.")
        bad_ladder = ladder_problems(self.ladder, self.format_version)
        out += bad_ladder
        out += self._strategy_problems()
        if not bad_ladder:
            out += off_ladder_problems(self.ladder, self.strategies, self.fallback, is_strategy)
        out += self._mode_problems()
        if not isinstance(self.tau, (int, float)) or isinstance(self.tau, bool) or not 0.0 <= self.tau <= 1.0:
            out.append(f"`tau` must be a number in [0, 1]. Got {self.tau!r}.")
        out += self._target_problems()
        out += self._rule_problems()
        for name in ("metrics", "params", "certificate"):
            if not isinstance(getattr(self, name), dict):
                out.append(f"`{name}` must be a dict. Got {type(getattr(self, name)).__name__}.")
        out += _template_problems(self.prompt_template)
        out += self._digest_problems()
        out += checkpoint_problems(self.checkpoints, self.ladder or PAIR)
        for name in ("training_data_hash", "created_at"):
            if not isinstance(getattr(self, name), str):
                out.append(f"`{name}` must be a string. Got {getattr(self, name)!r}.")
        return out

    def _strategy_problems(self) -> list[str]:
        out = []
        if not self.strategies:
            out.append("`strategies` must list at least one candidate strategy id. Got [].")
        bad = [s for s in self.strategies if not is_strategy(s)]
        if bad:
            out.append(f"`strategies` holds unknown strategy ids {bad}; use ids such as 'large_direct' or 'transfer_64'.")
        if len(set(self.strategies)) != len(self.strategies):
            out.append(f"`strategies` must not repeat ids. Got {self.strategies}.")
        if not is_strategy(self.fallback):
            out.append(f"`fallback` must be a strategy id such as 'large_reason'. Got {self.fallback!r}.")
        costs = self.expected_cost_ms
        extra = sorted(set(costs) - set(self.strategies))
        if extra:
            out.append(f"`expected_cost_ms` has entries for non-candidates {extra}; candidates are {self.strategies}.")
        if costs and set(self.strategies) - set(costs):
            out.append(f"`expected_cost_ms` lacks entries for {sorted(set(self.strategies) - set(costs))}.")
        bad_costs = {k: v for k, v in costs.items() if not _finite_nonneg(v)}
        if bad_costs:
            out.append(f"`expected_cost_ms` values must be finite numbers >= 0. Got {bad_costs}.")
        return out

    @property
    def is_pair(self) -> bool:
        """Whether the policy runs on a pair of models (the two-model version's semantics)."""
        return list(self.ladder or PAIR) == PAIR

    def _mode_problems(self) -> list[str]:
        out = []
        if self.mode not in MODES:
            out.append(f"`mode` must be {one_of(MODES)}. Got {self.mode!r}.")
        paid_problems = paid_stage_problems(self.ladder, self.paid_stages, PAID_STAGES)
        if paid_problems:
            out += paid_problems
        elif self.mode == "one-shot" and self.paid_stages:
            out.append(f"`paid_stages` must be [] in mode 'one-shot'. Got {self.paid_stages!r}.")
        elif self.mode == "cascade" and not self.paid_stages:
            out.append("`paid_stages` must start with 'large_direct' in mode 'cascade'. Got []." if self.is_pair else
                       "`paid_stages` of a cascade must list at least one direct stage of the ladder. Got [].")
        allowed = {"prompt", *self.paid_stages}
        model_features = self.features if not isinstance(self.rule, dict) or self.rule.get("name") not in (
            "fixed", "mutual-verification") else []  # a rule that reads no model needs none of its features
        for feat in model_features:
            try:
                stages = feature_stages(feat)
            except UnknownStrategyError as exc:
                out.append(f"`features`: {exc}")
                continue
            unpaid = [s for s in stages if s not in allowed]
            if unpaid:
                out.append(
                    f"`features`: {feat!r} needs stage(s) {unpaid} that are not in `paid_stages` "
                    f"{self.paid_stages}; add them there or drop the feature."
                )
        if len(set(self.features)) != len(self.features):
            out.append(f"`features` must not repeat names. Got {self.features}.")
        return out

    def _rule_problems(self) -> list[str]:
        if not isinstance(self.rule, dict):
            return [f"`rule` must be a dict like {{'name': 'lagrangian', 'param': 0.001}}. Got {self.rule!r}."]
        out = rule_problems(self.decision_rule, self.strategies)
        if out:
            return out
        unpaid = [s for s in rule_stages(self.rule) if s not in self.paid_stages]
        if unpaid:
            out.append(f"`rule` {self.rule['name']!r} needs stage(s) {unpaid} before deciding; they are not in "
                       f"`paid_stages` {self.paid_stages}. Add them there (mode 'cascade').")
        if uses_model(self.decision_rule) and self.fallback not in self.strategies:
            out.append(f"`fallback` {self.fallback!r} of a learned rule must be a candidate ({one_of(self.strategies)}).")
        c = self.certificate
        if isinstance(c, dict) and c:
            missing = [k for k in CERTIFICATE_KEYS if k not in c]
            if missing:
                out.append(f"`certificate` lacks {missing}; a certificate records {list(CERTIFICATE_KEYS)}.")
            else:
                out += _certificate_problems(c, uses_model(self.decision_rule))
                out += certificate_field_problems(c, self.ladder or PAIR)
        return out

    @property
    def decision_rule(self) -> dict:
        """The rule in force, with the tau-rule's parameter taken from `tau`."""
        return {**self.rule, "param": self.tau} if self.rule.get("name") == "tau" else dict(self.rule)

    @property
    def decision_features(self) -> list[str]:
        """The features a decision reads: the model's (when the rule reads the model) plus the rule's own."""
        rule = self.decision_rule
        base = list(self.features) if uses_model(rule) else []
        return base + [f for f in rule_features(rule) if f not in base]

    def _digest_problems(self) -> list[str]:
        d = self.model_sha256
        if not isinstance(d, dict):
            return [f"`model_sha256` must be a dict {{file: sha256 hex}}. Got {type(d).__name__}."]
        bad = {k: v for k, v in d.items() if not isinstance(k, str) or not isinstance(v, str) or not SHA256_RE.match(v)}
        if bad:
            return [f"`model_sha256` values must be 64 lowercase hex digits keyed by file name. Got {_short(bad)}."]
        return []

    def _target_problems(self) -> list[str]:
        t = self.target
        if not isinstance(t, dict):
            return [f"`target` must be a dict like {{'kind': 'accuracy', 'value': 0.98}}. Got {t!r}."]
        if not t:
            return []
        out = []
        if t.get("kind") not in TARGET_KINDS:
            out.append(f"`target['kind']` must be {one_of(TARGET_KINDS)}. Got {t.get('kind')!r}.")
        if not _finite_nonneg(t.get("value")):
            out.append(f"`target['value']` must be a finite number >= 0. Got {t.get('value')!r}.")
        return out

    # ---- JSON I/O ----
    def to_dict(self) -> dict:
        out = asdict(self)
        out["rule"] = self.decision_rule
        return out

    @classmethod
    def from_dict(cls, data: dict, *, source: str = "policy") -> "Policy":
        if not isinstance(data, dict):
            raise RouterLoadError(f"{source} must hold a JSON object. Got {type(data).__name__}.")
        version = data.get("format_version", FORMAT_VERSION)
        if isinstance(version, int) and version > FORMAT_VERSION:
            raise RouterLoadError(
                f"{source} has format_version {version}, newer than this routedvlm understands "
                f"({FORMAT_VERSION}). Upgrade routedvlm to load this router."
            )
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        missing = sorted(k for k in ("router_type", "strategies") if k not in data)
        if unknown or missing:
            raise RouterLoadError(
                f"{source} is not a valid policy: unknown keys {unknown}, missing keys {missing}. "
                f"Valid keys are {one_of(known)}."
            )
        try:
            return cls(**data)
        except RouterError as exc:
            raise RouterLoadError(str(exc) if source == "policy" else f"{source}: {exc}") from None
        except (TypeError, ValueError, AttributeError) as exc:  # e.g. a number where a list belongs
            raise RouterLoadError(f"{source} holds a field of the wrong type ({exc}). Re-export the router "
                                  "with train-router.") from None

    def save(self, directory) -> Path:
        """Write `policy.json` into `directory` (created if needed), atomically."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / POLICY_FILE
        tmp = path.with_name(POLICY_FILE + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, default=_json_default) + "\n")
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, directory) -> "Policy":
        path = Path(directory) / POLICY_FILE
        if not path.is_file():
            raise RouterLoadError(
                f"No {POLICY_FILE} in {str(directory)!r}. A router folder holds policy.json plus its model "
                "files; pass the folder train-router wrote (its --output-dir)."
            )
        try:
            if path.stat().st_size > MAX_POLICY_BYTES:
                raise ValueError(f"{path.stat().st_size} bytes, more than {MAX_POLICY_BYTES}")
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise RouterLoadError(f"{path} is not readable JSON ({exc}). Re-export the router with train-router.") from None
        return cls.from_dict(data, source=str(path))


def _certificate_problems(c: dict, learned: bool) -> list[str]:
    """The certificate's numbers against their meaning (training/calibration/certify.py writes them)."""
    out, n, bound, delta = [], c["n"], c["bound"], c["delta"]
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_CALIBRATION_ROWS:
        out.append(f"`certificate['n']` (calibration rows) must be an integer in [0, {MAX_CALIBRATION_ROWS}]. Got {n!r}.")
    if bound is not None and not (_finite_nonneg(bound) and bound <= 1):
        out.append(f"`certificate['bound']` must be None or a number in [0, 1]. Got {bound!r}.")
    if delta is not None and not (_finite_nonneg(delta) and 0 < delta < 1):
        out.append(f"`certificate['delta']` must be None or a number in (0, 1). Got {delta!r}.")
    losses = c.get("losses")
    if losses is not None and isinstance(n, int) and (isinstance(losses, bool) or not isinstance(losses, int)
                                                      or not 0 <= losses <= n):
        out.append(f"`certificate['losses']` must be an integer in [0, n = {n}]. Got {losses!r}.")
    gains = c.get("gains")  # the difference's -1 rows (certificates before it have none)
    if gains is not None and isinstance(n, int) and (isinstance(gains, bool) or not isinstance(gains, int)
                                                     or not 0 <= gains <= n - (losses if isinstance(losses, int) else 0)):
        out.append(f"`certificate['gains']` must be an integer in [0, n - losses]. Got {gains!r}.")
    if c.get("loss_kind", "regret") not in ("difference", "regret", "error", "none"):
        out.append(f"`certificate['loss_kind']` must be one of difference, regret, error, none. Got "
                   f"{c.get('loss_kind')!r}.")
    if c.get("feasible") is False and bound is not None and learned:
        out.append("`certificate` says the target is infeasible, yet the rule is a learned one: an infeasible "
                   "calibration falls back to a fixed strategy. Re-export the router with train-router.")
    return out


def _template_problems(t) -> list[str]:
    if t is None:
        return []
    if not isinstance(t, dict) or set(t) - {"name", "text", "instructions"} or t.get("name") not in PROMPT_TEMPLATES:
        return [f"`prompt_template` must be None or a dict with `name` one of {one_of(PROMPT_TEMPLATES)} (and `text`, "
                f"`instructions`), as the labels' metadata records it. Got {t!r}."]
    return []



def _finite_nonneg(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def _short(d: dict) -> str:
    text = repr(d)
    return text if len(text) <= 200 else text[:200] + "...}"


def _json_default(o):
    if hasattr(o, "item"):  # numpy scalars
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")
