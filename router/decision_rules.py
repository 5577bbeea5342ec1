"""The decision-rule family: how a policy turns P(correct) per strategy (and, for mutual verification, one
feature) into one strategy per request. A rule is a small JSON object stored in `policy.json`:

- `{"name": "tau", "param": t}`: the cheapest strategy (by expected cost) whose P(correct) >= t, else the fallback;
- `{"name": "lagrangian", "param": l}`: argmax_s P(correct_s) - l * expected_cost_ms_s (l in accuracy per ms; the
  optimum under a mean-accuracy constraint, cascade routing / Dekoninck et al. 2025); ties go to the cheaper;
- `{"name": "binary", "param": t, "accept": "large_direct", "escalate": s}`: accept when P(accept) >= t, else s;
- `{"name": "mutual-verification", "keep_tokens": K, "accept": "large_direct", "escalate": "transfer_K"}`: accept when
  the two direct answers agree (`feat__large_direct+small_direct__agree` >= 0.5), else escalate; no model. On a ladder
  the two models are the escalation's: `accept` `<b>_direct`, `escalate` `transfer_<a>_<b>_<K>`, feature
  `feat__<b>_direct+<a>_direct__agree` (`mv_models`);
- `{"name": "fixed", "strategy": s}`: always s; no model.
`apply_rule` is the batch form and `apply_rule_one` the one-row form; they agree on every row (tested). Rules scan the
candidates in `cost_order` (expected cost, ties by the canonical `strategy_order`); a router's answer is a `Decision`.
"""
from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, field

import numpy as np

from routedvlm.errors import RouterError, one_of
from .strategies import (LARGE_DIRECT, LARGE_REASON, SMALL_DIRECT, is_strategy, parse_strategy, strategy_order,
                         transfer_id)

AGREE_FEATURE = "feat__large_direct+small_direct__agree"
RULE_NAMES = ("binary", "fixed", "lagrangian", "mutual-verification", "tau")
MODEL_RULES = ("binary", "lagrangian", "tau")
MAX_LAMBDA = 1e3  # accuracy per ms: beyond it every cost difference outweighs every probability (train-router: <= 10 / c_max)
EXTRA_KEYS = {"tau": (), "lagrangian": (), "binary": ("accept", "escalate"),
              "mutual-verification": ("keep_tokens", "accept", "escalate"), "fixed": ("strategy",)}


@dataclass(frozen=True)
class Decision:
    """A routing decision. `keep_tokens` is K for `transfer_<K>`, None otherwise (also for `transfer_all`,
    which keeps every reasoning token). `p_correct` has one entry per candidate strategy."""

    strategy: str
    keep_tokens: int | None
    p_correct: dict[str, float] = field(default_factory=dict)
    reason: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


@functools.lru_cache(maxsize=1024)  # read on every decision; a pure function of the id
def keep_tokens_of(strategy_id: str) -> int | None:
    """K for `transfer_<K>`; None for every other strategy, including `transfer_all`."""
    return parse_strategy(strategy_id).keep_tokens


def cost_order(strategies, costs: dict[str, float]) -> list[str]:
    """Strategies sorted by cost, then canonical order. Raises RouterError when a cost is missing."""
    missing = [s for s in strategies if s not in costs]
    if missing:
        raise RouterError(
            f"The `costs` of the decision rule must have an entry for every strategy. Missing {sorted(missing)}; "
            f"given costs for {sorted(costs)}. Add the expected latency (ms) of each candidate."
        )
    return sorted(strategies, key=lambda s: (float(costs[s]), strategy_order(s)))


def tau_rule(tau: float) -> dict:
    return {"name": "tau", "param": float(tau)}


def lagrangian_rule(lam: float) -> dict:
    return {"name": "lagrangian", "param": float(lam)}


def binary_rule(theta: float, escalate: str = LARGE_REASON, accept: str = LARGE_DIRECT) -> dict:
    return {"name": "binary", "param": float(theta), "accept": accept, "escalate": escalate}


def mutual_verification_rule(keep_tokens: int | None, source: str = "small", target: str = "large") -> dict:
    """Accept `<target>_direct` when it agrees with `<source>_direct`, else transfer `source` -> `target` at K."""
    return {"name": "mutual-verification", "param": None, "keep_tokens": keep_tokens, "accept": f"{target}_direct",
            "escalate": transfer_id(keep_tokens, source, target)}


def mv_models(rule: dict) -> tuple[str, str]:
    """(source, target): the two models whose direct answers a mutual-verification rule compares (its escalation's
    transfer pair; ('small', 'large') for the pair's rule)."""
    st = parse_strategy(rule["escalate"])
    return st.source, st.model


def agree_feature(source: str = "small", target: str = "large") -> str:
    """The agreement feature of two models' direct answers, the more expensive first (the pair's AGREE_FEATURE)."""
    return f"feat__{target}_direct+{source}_direct__agree"


def fixed_rule(strategy: str) -> dict:
    return {"name": "fixed", "param": None, "strategy": strategy}


def agreement(values) -> np.ndarray:
    """Mutual verification's test on agreement-feature values: >= 0.5 agrees; NaN (a missing answer) does not."""
    return np.nan_to_num(np.asarray(values, dtype=float), nan=0.0) >= 0.5


def agrees(value) -> bool:
    """`agreement` for one value (None counts as a missing answer)."""
    return value is not None and bool(agreement([float(value)])[0])


def uses_model(rule: dict) -> bool:
    """Whether the rule reads the router's P(correct) (tau, lagrangian, binary) or not (mutual verification, fixed)."""
    return rule["name"] in MODEL_RULES


def rule_features(rule: dict) -> list[str]:
    """Features the rule itself reads (beside the model's)."""
    return [agree_feature(*mv_models(rule))] if rule["name"] == "mutual-verification" else []


def rule_stages(rule: dict) -> list[str]:
    """Stages that must have run before the rule can decide (mutual verification: both direct answers)."""
    if rule["name"] != "mutual-verification":
        return []
    source, target = mv_models(rule)
    return [f"{target}_direct", f"{source}_direct"]


def describe(rule: dict) -> str:
    """A short human name: 'tau-rule (tau=0.870)', 'mutual verification K=8', ..."""
    name, param = rule["name"], rule.get("param")
    if name == "tau":
        return f"tau-rule (tau={param:.3f})"
    if name == "lagrangian":
        return f"lagrangian (lambda={param * 100:.3g}/100ms)"
    if name == "binary":
        return f"binary {rule['accept']}/{rule['escalate']} (p>={param:.3f})"
    if name == "mutual-verification":
        k = rule['keep_tokens'] if rule['keep_tokens'] is not None else 'all'
        pair = mv_models(rule) if is_strategy(rule.get("escalate")) else ("small", "large")
        return f"mutual verification K={k}" + ("" if pair == ("small", "large") else f" {pair[0]}/{pair[1]}")
    return f"always {rule['strategy']}"


def rule_problems(rule, strategies) -> list[str]:
    """Every problem of `rule` for a policy with candidate `strategies`, one message each."""
    if not isinstance(rule, dict) or rule.get("name") not in RULE_NAMES:
        got = rule.get("name") if isinstance(rule, dict) else rule
        return [f"`rule['name']` must be {one_of(RULE_NAMES)}. Got {got!r}."]
    name, out = rule["name"], []
    unknown = sorted(set(rule) - {"name", "param", *EXTRA_KEYS[name]})
    if unknown:
        out.append(f"`rule` of kind {name!r} has unknown keys {unknown}; valid keys are "
                   f"{one_of({'name', 'param', *EXTRA_KEYS[name]})}.")
    out += [f"`rule` of kind {name!r} lacks the key {k!r}." for k in EXTRA_KEYS[name] if k not in rule]
    param = rule.get("param")
    if name in MODEL_RULES and not _finite(param):
        out.append(f"`rule['param']` of a {name!r} rule must be a finite number. Got {param!r}.")
    elif name == "lagrangian" and not 0 <= param <= MAX_LAMBDA:
        out.append(f"`rule['param']` (lambda, accuracy per ms) of a 'lagrangian' rule must be in [0, {MAX_LAMBDA:g}]. "
                   f"Got {param!r}.")
    elif name == "binary" and not 0 <= param <= 1:
        out.append(f"`rule['param']` (theta, a probability) of a 'binary' rule must be in [0, 1]. Got {param!r}.")
    for key in ("accept", "escalate", "strategy"):
        if key in rule and not is_strategy(rule[key]):
            out.append(f"`rule[{key!r}]` must be a strategy id such as 'large_reason'. Got {rule[key]!r}.")
        elif key in rule and rule[key] not in strategies:
            out.append(f"`rule[{key!r}]` must be a candidate strategy ({one_of(strategies)}). Got {rule[key]!r}.")
    k = rule.get("keep_tokens")
    if name == "mutual-verification" and (k is not None and (isinstance(k, bool) or not isinstance(k, int) or k <= 0)):
        out.append(f"`rule['keep_tokens']` must be a positive integer or None (all). Got {k!r}.")
    elif name == "mutual-verification" and is_strategy(rule.get("escalate")):
        st = parse_strategy(rule["escalate"])
        expected = transfer_id(k, st.source, st.model) if st.is_transfer else transfer_id(k)
        if rule["escalate"] != expected:
            out.append(f"`rule['escalate']` of a mutual-verification rule keeping {k} tokens must be {expected!r}. "
                       f"Got {rule.get('escalate')!r}.")
        elif rule.get("accept") != f"{st.model}_direct":
            out.append(f"`rule['accept']` of a mutual-verification rule escalating to {st.id!r} must be "
                       f"{st.model + '_direct'!r} (the answer the transfer replaces). Got {rule.get('accept')!r}.")
    if name in ("binary", "mutual-verification") and "accept" in rule and rule.get("accept") == rule.get("escalate"):
        out.append(f"`rule['escalate']` of a {name!r} rule must differ from its `accept` ({rule.get('accept')!r}): a "
                   "rule whose escalation is its accepted answer never escalates.")
    if name == "binary" and rule.get("accept") not in strategies:
        out.append(f"`rule['accept']` of a binary rule must be a candidate strategy ({one_of(strategies)}), "
                   f"whose P(correct) it reads. Got {rule.get('accept')!r}.")
    return out


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def apply_rule(rule: dict, p, features, order: list[str], costs: dict, fallback: str) -> np.ndarray:
    """Chosen strategy ids (object array) for every row. `p`: DataFrame of P(correct) (columns = strategies; may be
    None for rules that read no model), `features`: DataFrame with the rule's features, `order`: strategies by
    cost then canonical order."""
    name = rule["name"]
    n = len(p) if p is not None else len(features)
    matrix = p[order].to_numpy(dtype=float) if name in ("tau", "lagrangian") and n and order else None
    accept = p[rule["accept"]].to_numpy(dtype=float) if name == "binary" else None
    agree = features[rule_features(rule)[0]].to_numpy(dtype=float) if name == "mutual-verification" else None
    return apply_rule_arrays(rule, n, matrix, accept, agree, order, costs, fallback)


def apply_rule_arrays(rule: dict, n: int, matrix, accept, agree, order: list[str], costs: dict,
                      fallback: str) -> np.ndarray:
    """The core of `apply_rule` on arrays: `matrix` = P(correct) with columns in `order` (tau, lagrangian),
    `accept` = P(accept strategy) (binary), `agree` = the agreement feature (mutual verification)."""
    name = rule["name"]
    if name == "fixed":
        return np.full(n, rule["strategy"], dtype=object)
    if name == "mutual-verification":
        return np.where(agreement(agree), rule["accept"], rule["escalate"]).astype(object)
    if name == "binary":
        return np.where(np.asarray(accept) >= rule["param"], rule["accept"], rule["escalate"]).astype(object)
    if n == 0 or not order:  # NaN compares False above
        return np.full(n, fallback, dtype=object)
    names = np.array(order, dtype=object)
    if name == "tau":
        ok = matrix >= rule["param"]
        return np.where(ok.any(axis=1), names[ok.argmax(axis=1)], fallback).astype(object)
    score = np.where(np.isnan(matrix), -np.inf, matrix - rule["param"] * np.array([costs[s] for s in order]))
    best = score.argmax(axis=1)  # first maximum: the cheaper on ties
    return np.where(np.isfinite(score.max(axis=1)), names[best], fallback).astype(object)


def apply_rule_one(rule: dict, p: dict, features: dict, order: list[str], costs: dict, fallback: str) -> tuple[str, str]:
    """(strategy, reason) for one row; the scalar twin of `apply_rule`."""
    name = rule["name"]
    if name == "fixed":
        return rule["strategy"], "fixed"
    if name == "mutual-verification":
        return (rule["accept"], "agree") if agrees(features.get(rule_features(rule)[0])) else (rule["escalate"], "disagree")
    if name == "binary":
        return (rule["accept"], "p>=theta") if p[rule["accept"]] >= rule["param"] else (rule["escalate"], "escalate")
    if name == "tau":
        for s in order:
            if p[s] >= rule["param"]:  # NaN compares False
                return s, "p>=tau"
        return fallback, "fallback"
    best, best_score = None, -math.inf
    for s in order:
        score = p[s] - rule["param"] * costs[s]
        if score > best_score:  # strict: the cheaper wins ties; NaN never wins
            best, best_score = s, score
    return (best, "argmax p-lambda*cost") if best is not None else (fallback, "fallback")


def check_rule(rule: dict, strategies) -> dict:
    """`rule` validated (RouterError listing every problem)."""
    problems = rule_problems(rule, strategies)
    if problems:
        raise RouterError("Invalid decision rule:\n  - " + "\n  - ".join(problems))
    return rule


def choose(p, costs: dict[str, float], tau: float, fallback: str) -> np.ndarray:
    """Per row of `p` (DataFrame: columns = strategies, values = P(correct)), the cheapest strategy whose
    P(correct) >= tau, else `fallback` (NaN never qualifies): the tau-rule as a function. Returns an object array."""
    return apply_rule(tau_rule(tau), p, None, cost_order(list(p.columns), costs), costs, fallback)
