"""`train-router --router lora-probe`: the LoRA probe trained with the LightGBM router's splits, calibration,
evaluation table and outputs (MLflow tracking and registration are the CLI's, shared with LightGBM).

Steps: reload the samples behind the labels (probe_data) -> same split and plan as LightGBM -> fine-tune adapter +
head with epoch checkpoints in `<output-dir>/checkpoints` (probe_fit; `--resume` continues) -> P(correct) on the
calibration and test rows -> certify the decision rule (certify.py) and evaluate, the probe's own cost charged to
every rule that reads it, beside a LightGBM router fitted and certified on the same split (probe_eval) ->
`<output-dir>/router` (policy.json, adapter/, head.safetensors).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from routedvlm.errors import ConfigError
from routedvlm.router.strategies import SMALL_DIRECT

from . import LORA_PROBE

log = logging.getLogger(__name__)


def resolve_base(config, metadata: dict) -> Path:
    """The small VLM checkpoint the probe adapts: --base, else the labels' small model found by `locate_checkpoint`
    (its recorded path, or a shipped toy checkpoint with the same weights hash)."""
    from routedvlm.router.checkpoints import locate_checkpoint, recorded_weights

    small = (metadata.get("models") or {}).get("small") or {}
    return locate_checkpoint(small.get("name"), recorded_weights(small), given=config.settings[LORA_PROBE].base, flag="--base",
                             what="The lora probe's base (the labels' small model)")


@dataclass
class ProbeJob:
    """Everything the probe job's steps share."""

    config: object
    labels_hash: str
    metadata: dict
    split: object
    policy: object
    net: object
    out: Path


def train_probe(config, labels: pd.DataFrame | None = None, metadata: dict | None = None, *,
                samples: pd.DataFrame | None = None):
    """Run the probe job; `samples` (labels + `image` + `question` columns) skips reloading. Returns TrainResult."""
    from routedvlm.router.lora_probe import LoRAProbeRouter

    from ..steps import TrainResult, write_outputs
    from ..report import format_table
    from .evaluate import summary_line

    job = prepare(config, labels, metadata, samples)
    state = fit(job)
    ev = evaluate_probe(job, state)
    router = LoRAProbeRouter(job.policy, job.net)
    write_outputs(router, ev, job.out)
    return TrainResult(router, ev, job.out, job.metadata, job.labels_hash, test=job.split.test,
                       table=format_table(ev) + "\n" + summary_line(ev))


def prepare(config, labels, metadata, samples) -> ProbeJob:
    """Labels, samples, the LightGBM plan and split, the probe's policy (tau not yet calibrated) and its net."""
    import torch

    from routedvlm.router.checkpoints import portable_path, weights_hash
    from routedvlm.router.lora_probe import ProbeNet, load_base
    from routedvlm.router.policy import Policy

    from ..labels_io import content_hash, load_labels
    from ..lightgbm.trainer import fit_router
    from ..steps import default_output_dir, plan, prompt_template_of
    from .data import attach_samples
    from .fit import set_feature_scaling
    from ..split import split_labels

    own = config.settings[LORA_PROBE]  # this type's settings (config.py)
    if own.resume and not config.output_dir:
        raise ConfigError("`--resume` needs the --output-dir of the run to continue (its checkpoints/ folder).")
    torch.set_num_threads(max(1, min(torch.get_num_threads(), 4)))
    if labels is None:
        labels, metadata = load_labels(config.data)
    metadata = dict(metadata or {})
    labels_hash = metadata.get("content_hash") or content_hash(labels)
    base = resolve_base(config, metadata)
    candidates, features, paid = plan(config, labels)
    data = samples if samples is not None else attach_samples(labels, metadata, own.dataset)
    split = split_labels(data, config.calib_fraction, config.test_fraction, config.seed)
    template = fit_router(config, split, candidates, features, paid, labels_hash,  # costs, fallback, split params
                          prompt_template=prompt_template_of(metadata))
    fields = {k: v for k, v in template.policy.to_dict().items() if k != "created_at"}
    policy = Policy(**{**fields, "router_type": LORA_PROBE,
                       "params": {"base_model": portable_path(base), "base_hash": weights_hash(base),
                                  "prompt": "small model, direct mode", "split": template.policy.params["split"]}})
    net = ProbeNet(load_base(base, given=base), candidates, features, lora_r=own.lora_r, lora_alpha=2 * max(own.lora_r, 1),
                   seed=config.seed)
    set_feature_scaling(net, split.train)
    out = Path(config.output_dir) if config.output_dir else default_output_dir()
    return ProbeJob(config, labels_hash, metadata, split, policy, net, out)


def fit(job: ProbeJob) -> dict:
    """Fine-tune with checkpoints; the training state plus final train and calibration losses."""
    from .fit import encode_rows, fit_probe, mean_loss

    c, own, net, split = job.config, job.config.settings[LORA_PROBE], job.net, job.split
    identity = {"base_hash": job.policy.params["base_hash"], "labels_hash": job.labels_hash,
                "strategies": net.strategies, "features": net.features, "lora_r": own.lora_r, "seed": c.seed,
                "split": split.sizes()}
    items = encode_rows(net, split.train)
    state = fit_probe(net, items, epochs=own.epochs, lr=own.lr, batch_size=own.batch_size, seed=c.seed,
                      checkpoints=job.out / "checkpoints", resume=own.resume, identity=identity)
    state["final_loss"] = mean_loss(net, items)
    state["calibration_loss"] = mean_loss(net, encode_rows(net, split.calibration, progress=False))
    log.info("probe trained: train loss %.4f -> %.4f; calibration loss %.4f", state["initial_loss"],
             state["final_loss"], state["calibration_loss"])
    return state


def evaluate_probe(job: ProbeJob, state: dict) -> dict:
    """Certify and evaluate with the probe's cost, beside LightGBM; fills the policy's rule, metrics and params."""
    from . import evaluate as pe
    from ..calibration.certify import apply_to_policy, certify
    from ..evaluate import evaluate
    from ..steps import pair_rows, policy_metrics

    c, net, split, policy = job.config, job.net, job.split, job.policy
    own = c.settings[LORA_PROBE]
    p_cal, _ = pe.predict_table(net, split.calibration)
    p_test, own_ms = pe.predict_table(net, split.test)
    shared_ms, shared_diff = pe.shared_cost_ms(net, split.test)
    pre = pe.PrecomputedRouter(policy, pd.concat([p_cal, p_test]))
    cost = float(pe.probe_cost(policy, own_ms, shared_ms).mean()) if len(own_ms) else 0.0
    trained_paid = list(policy.paid_stages)  # before the chosen rule may change the mode
    shared = SMALL_DIRECT in trained_paid
    cal = certify(pre, split.calibration, split.train, c.target, c.delta, proba=p_cal, model_cost_ms=cost)
    apply_to_policy(policy, cal)
    ev = evaluate(pre, split.calibration, split.test, c.target, cal, proba_test=p_test, model_cost_ms=cost,
                  pair_rows=pair_rows(c, pre, split, cal))
    ev = pe.side_by_side(ev, pe.lightgbm_comparison(c, split, policy.strategies, policy.features, trained_paid,
                                                    job.labels_hash))
    ev["split"] = split.sizes()
    ev["probe"] = {"cost_ms_mean": cost, "own_ms_mean": float(own_ms.mean()),
                   "own_ms_median": float(np.median(own_ms)), "shared_ms_median": shared_ms,
                   "shared_prefill": shared,
                   "shared_max_abs_diff": shared_diff,
                   "initial_train_loss": state["initial_loss"], "final_train_loss": state["final_loss"],
                   "train_losses": state["losses"], "calibration_loss": state["calibration_loss"],
                   "resumed_from": state.get("resumed_from")}
    policy.metrics = {**policy_metrics(ev), "probe_cost_ms_mean": cost, "calibration_loss": state["calibration_loss"]}
    policy.params.update({"probe_ms": {"own_median": float(np.median(own_ms)), "shared_median": shared_ms},
                          "training": {"epochs": own.epochs, "lr": own.lr, "batch_size": own.batch_size, "seed": c.seed,
                                       "train_losses": state["losses"]}})
    return ev
