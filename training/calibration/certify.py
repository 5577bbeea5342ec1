"""Certified calibration (Learn-then-Test): the member of the rule family (rule_family.py) that meets the target
with a finite-sample guarantee at the least mean latency on the calibration rows.

The certified loss per row; its mean is the risk, limited to `alpha`:
- target `accuracy` f (a fraction of the best single strategy's): the reference is the candidate most accurate on
  the training rows (normally large_reason); alpha = (1 - f) x the reference's training accuracy. Certified:
  accuracy >= accuracy(reference) - alpha. Two losses (`target["loss"]`):
  - `difference` (the default): the accuracy difference itself, +1 [reference right and chosen wrong], -1 [reference
    wrong and chosen right], else 0; its mean is accuracy(reference) - accuracy(chosen), exactly the quantity asked
    for. p-value (`target["test"]`): `betting` (the default, by measurement: benchmarks/README.md, "Price of the
    guarantee"): Waudby-Smith-Ramdas betting on the loss in [-1, 1], rows read in a fixed data-independent order
    (ltt.betting_p_value, ltt.shuffled); or `clopper-pearson`: the least level at which the Clopper-Pearson upper
    bound on P(+1) minus the lower bound on P(-1), each at half the level, is <= alpha;
  - `regret`: 1[reference right and chosen wrong] (rows it gets right and the reference wrong count for nothing):
    the stronger statement "never worse than the reference on its rows, but on an alpha share"; exact binomial.
- target `min_accuracy` a: loss = 1[chosen wrong], alpha = 1 - a. Certified: accuracy >= a.
- target `latency_ms` L: not certified; the most accurate member whose calibration mean latency is <= L.
One null "risk > alpha" per member (ltt.py); fixed-sequence testing in each chain at level delta / (number of
chains), Bonferroni over the chains: with probability >= 1 - delta over the calibration draw every certified member
has risk <= alpha on new traffic from the same distribution (i.i.d.; nothing per request, nothing under shift). The
least mean calibration latency wins among the certified (ties: lower risk, then the simpler rule: baselines, binary,
tau, lagrangian). "Always the reference" has loss 0 on every row by construction: certified without a test, and
reported as trivial (`trivial: true`): a target only it meets is no routing. When nothing else is certified the
calibration is infeasible: always the reference, and `rows_needed` says about how many calibration rows would
certify the most promising member at its observed risk.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from routedvlm.errors import ConfigError
from routedvlm.router.decision_rules import fixed_rule

from . import ltt
from .risk import METHOD, METHODS, RiskSpec, risk_spec  # noqa: F401 (re-exported: certify.risk_spec)
from .rule_family import CHAINS, Member, Scorer, baseline_members, model_chains
from .selection import SELF_ONLY, claim_sentence

log = logging.getLogger(__name__)
DEFAULT_DELTA = 0.1
@dataclass
class Scored:
    """A member's numbers on the calibration rows and its test result."""

    member: Member
    accuracy: float
    mean_latency_ms: float
    losses: int  # rows with loss +1
    n: int
    p_value: float | None = None
    certified: bool = False
    gains: int = 0  # rows with loss -1 (the difference: reference wrong and chosen right)

    @property
    def risk(self) -> float:
        return (self.losses - self.gains) / self.n if self.n else float("nan")

    def to_dict(self) -> dict:
        return {**self.member.to_dict(), "accuracy": self.accuracy, "mean_latency_ms": self.mean_latency_ms,
                "losses": self.losses, "gains": self.gains, "risk": self.risk, "p_value": self.p_value,
                "certified": self.certified}


@dataclass
class Calibration:
    """The outcome of `certify`: the chosen member, every member's numbers per chain, and the certificate."""

    target: dict
    spec: RiskSpec
    delta: float | None
    n: int
    level: float | None
    chains: dict = field(default_factory=dict)  # chain -> [Scored], in test order
    chosen: Scored | None = None
    feasible: bool = False
    rows_needed: int | None = None
    needed_for: str | None = None
    router_mode: tuple = ("", ())  # the mode and paid stages the router's model was trained for
    calibration_hash: str = ""  # content hash of the calibration rows (the registry's delta ledger is keyed by it)

    def best(self, chain: str) -> Scored | None:
        """The chain's least-latency certified member (latency targets: its pick within the budget)."""
        pool = [s for s in self.chains.get(chain, []) if s.certified]
        return min(pool, key=_rank) if pool else None

    def statement(self) -> str:
        """The sentence a user can rely on, or why there is none."""
        s, c = self.spec, self.chosen
        if s.kind == "none":
            return (f"latency budget {self.target['value']:g} ms: {c.member.name} has mean latency "
                    f"{c.mean_latency_ms:.1f} ms on the {self.n} calibration rows (not certified)")
        claim = (f"accuracy >= accuracy({s.reference}) - {s.alpha:.4f}" if s.relative
                 else f"accuracy >= {1 - s.alpha:.4f}")
        if not self.feasible:
            more = (f"about {self.rows_needed} are needed ({self.needed_for} at its observed risk)" if self.rows_needed
                    else "no rule's observed risk is below the limit, so more rows alone will not do; lower the target")
            return (f"infeasible with {self.n} calibration rows: no rule certifies {claim} at delta={self.delta:g}; "
                    f"{more}. Falling back to always {c.member.rule.get('strategy', s.reference)}.")
        seen = f"{c.losses} - {c.gains}" if s.kind == "difference" else f"{c.losses}"
        fixed = (f"a fixed rule, no routing: only always {c.member.rule.get('strategy')} is certified; "
                 if self.trivial else "")
        return claim_sentence(self.delta, 1, self.delta, f"{claim} ({fixed}{c.member.name}; {s.loss_text} <= "
                              f"{s.alpha:.4f}; observed {seen} in {self.n}, p = {c.p_value:.3g} <= {self.level:.3g})")

    @property
    def trivial(self) -> bool:
        """The chosen rule is a fixed strategy (no routing): what it certifies needs no router."""
        return self.chosen is not None and self.chosen.member.rule.get("name") == "fixed"

    @property
    def outcome(self) -> str:
        """'routing' (a rule that routes is certified), 'fixed rule' (only a fixed strategy other than the reference
        is), 'infeasible' (only the reference, certified by construction: always it), 'not certified' (budgets)."""
        if self.spec.kind == "none":
            return "not certified"
        return "infeasible" if not self.feasible else "fixed rule" if self.trivial else "routing"

    def certificate(self) -> dict:
        """What policy.json records (`certificate`)."""
        s, c = self.spec, self.chosen
        bound = None if s.kind == "none" else (s.alpha if s.relative else 1 - s.alpha)
        meaning = ("no bound" if s.kind == "none" else "accuracy >= bound" if s.kind == "error"
                   else f"accuracy >= accuracy({s.reference}) - bound")
        # `delta`: the level that holds for this router (restated after any choice among routers: selection.py);
        # `delta_each`: the level its own test ran at; `level_per_chain`: each chain's fixed-sequence level
        return {"delta": self.delta, "delta_each": self.delta, "delta_after_selection": self.delta,
                "routers_compared": 1, "selection": SELF_ONLY, "calibration_hash": self.calibration_hash,
                "n": self.n, "bound": bound, "bound_meaning": meaning,
                "method": s.method if s.kind != "none" else "empirical (latency budgets are not certified)",
                "loss": s.loss_text, "loss_kind": s.kind, "risk_limit": s.alpha, "reference": s.reference,
                "reference_train_accuracy": s.reference_train_accuracy, "level_per_chain": self.level,
                "chains": [k for k in CHAINS if k in self.chains], "chosen": c.member.name,
                "router_mode": self.router_mode[0], "router_paid_stages": list(self.router_mode[1]),
                "risk_observed": c.risk, "losses": c.losses, "gains": c.gains, "p_value": c.p_value,
                "certified": bool(c.certified and self.feasible) if s.kind != "none" else False,
                "feasible": bool(self.feasible), "trivial": self.trivial, "outcome": self.outcome,
                "rows_needed": self.rows_needed, "statement": self.statement()}

    def to_dict(self) -> dict:
        return {"certificate": self.certificate(), "chosen": self.chosen.to_dict(),
                "best_per_chain": {k: (b.to_dict() if (b := self.best(k)) else None) for k in self.chains},
                # the fields of the old tau OperatingPoint, for the summary metrics
                "param": self.chosen.member.rule.get("param"), "accuracy": self.chosen.accuracy,
                "mean_latency_ms": self.chosen.mean_latency_ms, "n": self.n}


TIE_ORDER = ("baselines", "binary", "tau", "lagrangian")  # equal latency and risk: the simpler rule


def _rank(s: Scored) -> tuple:
    return (s.mean_latency_ms, s.risk, TIE_ORDER.index(s.member.chain))


def ordered_chains(router, train: pd.DataFrame, spec: RiskSpec) -> dict[str, list[Member]]:
    """Every chain of the family for `router`; the baselines ordered by their loss on the training rows."""
    from ..costs import label_strategies

    chains = model_chains(router.policy, label_strategies(train))
    scorer = Scorer(router, train)
    keyed = []
    for m in baseline_members(train, router.policy.strategies):
        correct, latency, _ = scorer.score(m)
        keyed.append((0 if spec.is_trivial(m) else 1, spec.losses(scorer.df, correct).mean(), -latency.mean(), m))
    chains["baselines"] = [k[-1] for k in sorted(keyed, key=lambda k: k[:3])]
    return chains


def certify(router, calib: pd.DataFrame, train: pd.DataFrame, target: dict, delta: float = DEFAULT_DELTA, *,
            proba: pd.DataFrame | None = None, model_cost_ms=0.0, reference: str | None = None,
            chains=None) -> Calibration:
    """Calibrate `router`'s rule on `calib` to `target` (module docstring). `proba`: its P(correct) on `calib`
    (computed when None); `model_cost_ms`: added to the latency of members that read the model (a probe's pass);
    `reference`: the regret's reference when it is not the most accurate candidate (training/sub_pairs.py);
    `chains`: the chains to test (default all of CHAINS): delta is split over the chains that test something (the
    reference alone, kept as the fallback, tests nothing)."""
    if not (isinstance(delta, (int, float)) and 0.0 < delta < 1.0):
        raise ConfigError(f"The `delta` parameter must be in (0, 1). Got {delta!r} instead.")
    unknown = sorted(set(chains or ()) - set(CHAINS))
    if unknown or (chains is not None and not chains):
        raise ConfigError(f"`chains` must name some of {', '.join(CHAINS)}. Got {chains!r} instead.")
    spec = risk_spec(target, train, router.policy.strategies, reference)
    chains = _only(ordered_chains(router, train, spec), chains, spec)
    scorer, n = Scorer(router, calib, proba, model_cost_ms), len(calib)
    scored, loss_rows = {}, {}
    for name, members in chains.items():
        rows, lost = [], []
        for m in members:
            correct, latency, _ = scorer.score(m)
            loss = spec.losses(scorer.df, correct)
            lost.append(loss)
            rows.append(Scored(m, float(correct.mean()), float(latency.mean()), int((loss > 0).sum()), n,
                               gains=int((loss < 0).sum())))
        scored[name], loss_rows[name] = rows, np.asarray(lost)
    mode = (router.policy.mode, tuple(router.policy.paid_stages))
    if spec.kind == "none":
        cal = _pick_within_budget(target, spec, scored, n)
        cal.router_mode, cal.calibration_hash = mode, calibration_hash(calib)
        return cal
    level = delta / max(1, sum(any(not spec.is_trivial(s.member) for s in rows) for rows in scored.values()))
    for name, rows in scored.items():
        tested = spec.p_values(loss_rows[name], level)
        p = [0.0 if spec.is_trivial(s.member) else float(tested[i]) for i, s in enumerate(rows)]
        for i, s in enumerate(rows):
            s.p_value = p[i]
        for i, ok in enumerate(ltt.certified_prefix(p, level)):
            rows[i].certified = bool(ok)
    return _choose(Calibration(target, spec, float(delta), n, level, scored, router_mode=mode,
                               calibration_hash=calibration_hash(calib)))


def _only(chains: dict, keep, spec) -> dict:
    """`chains` restricted to `keep` (None: all); the reference's fixed rule stays (the fallback, untested)."""
    if keep is None:
        return chains
    out = {k: v for k, v in chains.items() if k in keep}
    if "baselines" not in out:
        out["baselines"] = [m for m in chains.get("baselines", []) if spec.is_trivial(m)] or chains["baselines"]
    return out


def calibration_hash(calib: pd.DataFrame) -> str:
    """The content hash of the calibration rows (order-free): their ids and labelled outcomes (not features, images
    or hidden states, which a router may attach in memory): the key of the registry's delta ledger."""
    from ..labels_io import content_hash

    keep = [c for c in calib.columns if c in ("sample_id", "dataset") or c.startswith(("correct__", "latency_ms__"))]
    return content_hash(calib[keep])


def _choose(cal: Calibration) -> Calibration:
    every = [s for rows in cal.chains.values() for s in rows]
    certified = [s for s in every if s.certified]
    cal.feasible = any(not cal.spec.is_trivial(s.member) for s in certified)
    if cal.feasible:
        cal.chosen = min(certified, key=_rank)
        return cal
    ref = fixed_rule(cal.spec.reference)  # not a member when the reference is no candidate: the least risk instead
    fixed = [s for s in every if s.member.rule["name"] == "fixed"]
    cal.chosen = next((s for s in every if s.member.rule == ref), None) or min(fixed, key=lambda s: (s.risk, _rank(s)))
    promising = [s for s in every if not cal.spec.is_trivial(s.member) and s.risk < cal.spec.alpha]
    if promising:
        half = [s for s in promising if s.risk <= cal.spec.alpha / 2]
        best = min(half, key=_rank) if half else min(promising, key=lambda s: (s.risk, s.mean_latency_ms))
        needed = (ltt.rows_needed_difference(best.losses / cal.n, best.gains / cal.n, cal.spec.alpha, cal.level)
                  if cal.spec.kind == "difference" else ltt.rows_needed(best.risk, cal.spec.alpha, cal.level))
        cal.rows_needed, cal.needed_for = needed, best.member.name
    log.warning("%s", cal.statement())
    return cal


def _pick_within_budget(target: dict, spec: RiskSpec, scored: dict, n: int) -> Calibration:
    budget = float(target["value"])
    cal = Calibration(target, spec, None, n, None, scored)
    every = [s for rows in scored.values() for s in rows]
    for s in every:
        s.certified = s.mean_latency_ms <= budget
    within = [s for s in every if s.certified]
    cal.feasible = bool(within)
    cal.chosen = (min(within, key=lambda s: (-s.accuracy, s.mean_latency_ms, TIE_ORDER.index(s.member.chain)))
                  if within else min(every, key=lambda s: (s.mean_latency_ms, -s.accuracy)))
    if not within:
        log.warning("no rule meets the latency budget %g ms on the calibration rows; using the fastest, %s (%.1f ms)",
                    budget, cal.chosen.member.name, cal.chosen.mean_latency_ms)
    return cal


def apply_to_policy(policy, cal: Calibration) -> None:
    """Write the chosen rule, its mode and paid stages, the target and the certificate into `policy`."""
    m = cal.chosen.member
    policy.mode, policy.paid_stages = m.mode, list(m.paid_stages)
    if m.rule["name"] == "tau":
        policy.rule, policy.tau = {"name": "tau"}, float(m.rule["param"])
    else:
        policy.rule = dict(m.rule)
    policy.target = dict(cal.target)
    policy.certificate = cal.certificate()
    problems = policy.problems()
    if problems:  # a member the router cannot run is a bug in rule_family, not a user error
        raise AssertionError(f"calibrated policy is invalid: {problems}")
