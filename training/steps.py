"""The steps every router type's trainer shares: the plan (candidates, features, paid stages), the Policy a trained
router starts from, certify + evaluate, the outputs (router folder, evaluation.json, curve.png), and `TrainResult`.

Each trainer (the one its registry entry names: `lightgbm.train_lightgbm`, `knn.train_knn`, `probe.lora_probe.train_probe`,
`probe.self_probe.train_self_probe`) imports these; `pipeline.train_router` picks the trainer by router type. This module imports no trainer (no import circle).
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pandas as pd

from routedvlm.errors import ConfigError, TrainingError, one_of
from routedvlm.router.strategies import strategy_order
from routedvlm.router.strategies import LARGE_REASON

from .config import TrainConfig

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    router: object  # the trained Router (any type)
    evaluation: dict
    output_dir: Path
    metadata: dict = field(default_factory=dict)
    labels_hash: str = ""
    tracking: dict = field(default_factory=dict)  # run_id, model_uri, version, champion
    test: pd.DataFrame | None = None  # the test split (the champion is re-evaluated on it)
    table: str = ""  # report.format_table(evaluation)


def candidate_strategies(df: pd.DataFrame, wanted: list[str] | None) -> list[str]:
    """Candidates in canonical order: `wanted`, or every strategy the labels hold; at least two."""
    from .costs import label_strategies

    present = label_strategies(df)
    if wanted:
        missing = [s for s in wanted if s not in present]
        if missing:
            raise ConfigError(f"`--strategies` names {missing}, which the labels do not hold; "
                              f"the labels have {one_of(present)}.")
        chosen = list(dict.fromkeys(wanted))
    else:
        chosen = present
    if len(chosen) < 2:
        raise TrainingError(f"train-router needs at least two candidate strategies to route between; the labels "
                            f"have {present}. Label more strategies (routedvlm label --strategies ...).")
    return sorted(chosen, key=strategy_order)


def choose_fallback(train: pd.DataFrame, candidates: list[str], wanted: str | None) -> str:
    if wanted:
        if wanted not in candidates:
            raise ConfigError(f"`--fallback` {wanted!r} must be a candidate strategy ({one_of(candidates)}).")
        return wanted
    if LARGE_REASON in candidates:
        return LARGE_REASON
    return max(candidates, key=lambda s: float(train[f"correct__{s}"].mean()))


def _check_learnable(df: pd.DataFrame, candidates: list[str]) -> None:
    correct = df[[f"correct__{s}" for s in candidates]].to_numpy(dtype=bool)
    if not correct.any():
        raise TrainingError(f"No candidate strategy is correct on any of the {len(df)} rows; there is nothing to "
                            "route to. Check the scorer and the reference answers (routedvlm labels validate).")


def resolve_mode(config: TrainConfig, candidates: list[str]) -> str:
    """Settle `config.mode` 'auto' on the candidates (config.py) and say which mode and why (a log line, and
    `config.mode_choice`, which policy.json's params and MLflow record). Returns the mode."""
    from routedvlm.router.strategies import parse_strategy

    if config.mode != "auto":
        config.mode_choice = getattr(config, "mode_choice", None) or f"{config.mode} (given)"
        return config.mode
    direct = [s for s in candidates if parse_strategy(s).mode == "direct"]
    if len(direct) == len(candidates):
        config.mode = "one-shot"
        config.mode_choice = (f"one-shot (auto: the candidates {', '.join(candidates)} are direct answers only; a "
                              "cascade would pay the strongest one first and could save nothing)")
    else:
        config.mode = "cascade"
        config.mode_choice = ("cascade (auto: the candidates include reasoning or transfer strategies to escalate to "
                              "after the paid direct answer)")
    log.info("mode: %s", config.mode_choice)
    return config.mode


def default_output_dir() -> Path:
    return Path("runs") / f"router-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def plan(config: TrainConfig, labels: pd.DataFrame, metadata: dict | None = None, *,
         train: pd.DataFrame | None = None) -> tuple[list[str], list[str], list[str]]:
    """(candidates, features, paid stages), after every input check that needs no training. Candidates:
    --strategies, else the labels' metadata `candidates`, else every strategy in the labels. Constant features are
    found on the training rows (`train`, default: the training split of `labels` under the config's split)."""
    from . import fit as fitmod
    from .split import check_enough_rows, split_labels

    check_enough_rows(labels, int((metadata or {}).get("failed_rows") or 0))  # the row count first: nothing else helps
    candidates = candidate_strategies(labels, config.strategies or (metadata or {}).get("candidates"))
    _check_learnable(labels, candidates)
    resolve_mode(config, candidates)
    features = fitmod.select_features(labels, config.mode, config.features, config.with_small_direct)
    if train is None:
        train = split_labels(labels, config.calib_fraction, config.test_fraction, config.seed).train
    features = fitmod.check_features(labels, features, not config.strict_features, config.allow_missing_features,
                                     config.max_features, train=train)
    return candidates, features, fitmod.paid_stages_for(features, config.mode, fitmod.ladder_in(labels))


def prompt_template_of(metadata: dict) -> dict | None:
    """The prompt template the labels were made with (the router applies the same at run time). Labels that
    routedvlm wrote before it recorded templates used lmms-eval's post prompts with their adapter's instruction
    (none for the toy world); labels of other writers get None (questions as given), with a warning."""
    from routedvlm.data.adapters import ADAPTERS

    metadata = metadata or {}
    if metadata.get("prompt_template") is not None:
        return metadata["prompt_template"]
    adapter = ADAPTERS.get(str((metadata.get("sample_source") or {}).get("adapter")))
    if adapter is not None:
        template = adapter.template("lmms-eval")
        if not any(template.instructions.values()):
            template = adapter.template("none")
        log.info("the labels record no prompt_template; routedvlm labelled %s data with %r then", adapter.name,
                 template.name)
        return template.to_dict()
    log.warning("the labels' metadata records no prompt_template: the router will send questions to the models "
                "as given; if the labels' questions had a post prompt added, give RoutedVLM the same text")
    return None


def base_policy(config: TrainConfig, split, candidates, features, paid, labels_hash: str, router_type: str,
                params: dict, *, prompt_template: dict | None = None):
    """The Policy every trained router type starts from (tau not yet calibrated): candidates, features, expected
    costs and fallback from the training rows, the target, the labels' hash, the split; `params` are the type's
    (and `mode_choice`: which mode and why, steps.resolve_mode)."""
    resolve_mode(config, candidates)
    params = {**params, "mode_choice": config.mode_choice,
              "calibration_share": {"share": config.calib_fraction,
                                    "choice": getattr(config, "calib_choice", None) or f"{config.calib_fraction} (given)",
                                    "mean_latency_ms": getattr(config, "calib_scores", None) or {}}}
    from routedvlm.router.policy import Policy

    from .costs import expected_costs
    from .fit import ladder_in

    return Policy(
        router_type=router_type, mode=config.mode, strategies=candidates, paid_stages=paid, features=features,
        ladder=list(ladder_in(split.train)),
        expected_cost_ms=expected_costs(split.train, candidates, config.mode, paid), tau=0.5,
        fallback=choose_fallback(split.train, candidates, config.fallback), target=config.target,
        training_data_hash=labels_hash, prompt_template=prompt_template,
        params={**params, "split": {**split.sizes(), "seed": config.seed}},
    )


def policy_metrics(ev: dict) -> dict:
    """The numbers policy.json and MLflow record: test results of the chosen rule, calibration and certificate."""
    learned, cal, cert = ev["rows"][-1], ev["calibration"], ev["certificate"]
    out = {"test_accuracy": learned["accuracy"], "test_mean_latency_ms": learned["mean_latency_ms"],
           "test_p90_latency_ms": learned["p90_latency_ms"],
           "test_speedup_vs_large_reason": learned["speedup_vs_large_reason"], "test_utility": ev["utility"],
           "test_target_met": ev["target_met_test"], "test_required_accuracy": ev["required_test"],
           "test_standard_error": ev["standard_error_test"],
           "calibration_accuracy": cal["accuracy"], "calibration_mean_latency_ms": cal["mean_latency_ms"],
           "calibration_rows": cal["n"], "certificate_delta": cert["delta"],
           "certificate_delta_each": cert.get("delta_each", cert["delta"]),
           "certificate_delta_after_selection": cert.get("delta_after_selection"), "certificate_bound": cert["bound"],
           "certificate_risk_observed": cert["risk_observed"], "certificate_p_value": cert["p_value"],
           "certificate_feasible": cert["feasible"], "certificate_rows_needed": cert["rows_needed"],
           "certificate_trivial": cert.get("trivial", False)}
    out.update({f"auc_{k}": v for k, v in ev["auc"].items()})
    return out


def write_outputs(router, evaluation: dict, out: Path) -> None:
    """The router folder, evaluation.json and curve.png under `out` (LightGBM and probe alike)."""
    from .plot import plot_curve

    out.mkdir(parents=True, exist_ok=True)
    router.save(out / "router")
    (out / "evaluation.json").write_text(json.dumps(evaluation, indent=2, default=jsonable) + "\n")
    plot_curve(evaluation, out / "curve.png")
    if evaluation.get("probabilities"):
        from .probability import plot_reliability

        plot_reliability(evaluation["probabilities"], out / "reliability.png")


def jsonable(o):
    """json.dumps default for numpy scalars and arrays."""
    if hasattr(o, "tolist"):
        return o.tolist()
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")


def certify_and_evaluate(config, router, split) -> dict:
    """Certify the decision rule on the calibration rows (written into the router's policy), then evaluate it
    against the baselines on the test rows."""
    from .calibration.certify import apply_to_policy, certify
    from .evaluate import evaluate

    log.info("fitted the %s router; certifying the decision rule on %d rows", router.policy.router_type,
             len(split.calibration))
    cal = certify(router, split.calibration, split.train, config.target, config.delta,
                  chains=getattr(config, "chains", None))
    apply_to_policy(router.policy, cal)
    log.info("%s; evaluating against the baselines on %d test rows", cal.chosen.member.name, len(split.test))
    evaluation = evaluate(router, split.calibration, split.test, config.target, cal, train=split.train,
                          pair_rows=pair_rows(config, router, split, cal))
    evaluation["split"] = split.sizes()
    return evaluation


def pair_rows(config, router, split, cal) -> list[dict]:
    """On a ladder (unless --no-pair-comparison): the certified policy of every two-model sub-pair (sub_pairs.py)."""
    from routedvlm.router.strategies import LARGE_REASON

    from .fit import ladder_in
    from .sub_pairs import sub_pair_rows

    ladder = ladder_in(split.train)
    if len(ladder) < 3 or config.no_pair_comparison:
        return []
    log.info("training and certifying the best policy of every two-model sub-pair of %s", list(ladder))
    ref = float(split.test[f"latency_ms__{LARGE_REASON}"].mean()) if f"latency_ms__{LARGE_REASON}" in split.test else None
    return sub_pair_rows(config, split, router.policy.strategies, cal.spec.reference, ladder,
                         router.policy.training_data_hash, ref)


def finish(config, router, evaluation: dict, split, metadata: dict, labels_hash: str) -> TrainResult:
    """Metrics into the policy, the outputs written, the TrainResult."""
    from .report import format_table

    from routedvlm.router.checkpoint_identity import checkpoints_of

    router.policy.metrics = policy_metrics(evaluation)
    router.policy.checkpoints = checkpoints_of((metadata or {}).get("models"), router.policy.ladder)
    out = Path(config.output_dir) if config.output_dir else default_output_dir()
    write_outputs(router, evaluation, out)
    return TrainResult(router, evaluation, out, metadata, labels_hash, test=split.test, table=format_table(evaluation))
