"""`train-router --router lora-probe`: the LoRA probe trained with the LightGBM router's splits, calibration,
evaluation table and outputs (MLflow tracking and registration are the CLI's, shared with LightGBM).

Steps: reload the samples behind the labels (probe_data) -> same split and plan as LightGBM -> fine-tune adapter +
head with epoch checkpoints in `<output-dir>/checkpoints` (probe_fit; `--resume` continues) -> P(correct) on the
calibration and test rows -> calibrate tau -> evaluate with the probe's own cost, beside a LightGBM router
fitted on the same split (probe_eval) -> `<output-dir>/router` (policy.json, adapter/, head.safetensors).
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd

from routedvlm.router.errors import ConfigError, TrainingError

log = logging.getLogger(__name__)


def resolve_base(config, metadata: dict) -> Path:
    """The small VLM checkpoint the probe adapts: --base, else the labels' small model (metadata)."""
    from routedvlm.router.lora_probe import weights_hash

    small = (metadata.get("models") or {}).get("small") or {}
    base = config.base or small.get("name")
    if not base or not Path(str(base)).is_dir():
        raise ConfigError(f"The lora probe needs the small VLM checkpoint folder: --base must be a folder (the labels "
                          f"name {small.get('name')!r}). Got {str(base)!r}.")
    base = Path(str(base)).resolve()
    recorded = small.get("revision")
    if config.base is None or str(base) == str(Path(str(small.get("name", ""))).resolve()):
        if recorded and recorded.startswith("sha256:") and weights_hash(base) != recorded:
            log.warning("the weights in %s differ from the small model the labels were made with (%s)", base, recorded)
    return base


def train_probe(config, labels: pd.DataFrame | None = None, metadata: dict | None = None, *,
                samples: pd.DataFrame | None = None):
    """Run the probe job; `samples` (labels + `image` + `question` columns) skips reloading. Returns TrainResult."""
    import torch

    from routedvlm.router.lora_probe import LoRAProbeRouter, ProbeNet, load_base, weights_hash
    from routedvlm.router.policy import Policy

    from . import probe_eval as pe
    from .calibrate import calibrate_tau
    from .evaluate import evaluate, format_table
    from .labels_io import content_hash, load_labels
    from .pipeline import TrainResult, _default_output_dir, _plan, _policy_metrics, fit_router
    from .probe_data import attach_samples
    from .probe_fit import encode_rows, fit_probe, mean_loss, set_feature_scaling
    from .split import split_labels

    if config.resume and not config.output_dir:
        raise ConfigError("`--resume` needs the --output-dir of the run to continue (its checkpoints/ folder).")
    torch.set_num_threads(max(1, min(torch.get_num_threads(), 4)))
    if labels is None:
        labels, metadata = load_labels(config.data)
    metadata = dict(metadata or {})
    labels_hash = metadata.get("content_hash") or content_hash(labels)
    base = resolve_base(config, metadata)
    candidates, features, paid = _plan(config, labels)
    data = samples if samples is not None else attach_samples(labels, metadata, config.dataset)
    split = split_labels(data, config.calib_fraction, config.test_fraction, config.seed)
    template = fit_router(config, split, candidates, features, paid, labels_hash)  # costs, fallback, split params
    base_hash = weights_hash(base)
    fields = {k: v for k, v in template.policy.to_dict().items() if k != "created_at"}
    policy = Policy(**{**fields, "router_type": "lora-probe",
                       "params": {"base_model": str(base), "base_hash": base_hash, "prompt": "small model, direct mode",
                                  "split": template.policy.params["split"]}})
    net = ProbeNet(load_base(base), candidates, features, lora_r=config.lora_r, lora_alpha=2 * max(config.lora_r, 1),
                   seed=config.seed)
    set_feature_scaling(net, split.train)
    out = Path(config.output_dir) if config.output_dir else _default_output_dir()
    identity = {"base_hash": base_hash, "labels_hash": labels_hash, "strategies": candidates, "features": features,
                "lora_r": config.lora_r, "seed": config.seed, "split": split.sizes()}
    train_items = encode_rows(net, split.train)
    state = fit_probe(net, train_items, epochs=config.epochs, lr=config.lr, batch_size=config.batch_size,
                      seed=config.seed, checkpoints=out / "checkpoints", resume=config.resume, identity=identity)
    final_loss = mean_loss(net, train_items)
    cal_loss = mean_loss(net, encode_rows(net, split.calibration, progress=False))
    log.info("probe trained: train loss %.4f -> %.4f; calibration loss %.4f", state["initial_loss"], final_loss, cal_loss)
    p_cal, _ = pe.predict_table(net, split.calibration)
    p_test, own_ms = pe.predict_table(net, split.test)
    shared_ms, shared_diff = pe.shared_cost_ms(net, split.test)
    router = LoRAProbeRouter(policy, net)
    pre = pe.PrecomputedRouter(policy, pd.concat([p_cal, p_test]))
    cost = pe.probe_cost(policy, own_ms, shared_ms)
    target = dict(config.target)
    if target["kind"] == "latency_ms":  # the probe's own cost comes out of the budget
        target["value"] = max(target["value"] - float(cost.mean()), 0.0)
    op = calibrate_tau(p_cal, pre._costs, policy.fallback, split.calibration, policy.mode, paid, target, candidates)
    op.mean_latency_ms += float(cost.mean())
    policy.tau = op.param
    ev = evaluate(pre, split.calibration, split.test, config.target, config.baseline_k, op)
    ev = pe.add_probe_cost(ev, pre, split.test, cost)
    comparison = pe.lightgbm_comparison(config, split, candidates, features, paid, labels_hash, ev) if features else None
    ev = pe.side_by_side(ev, comparison)
    ev["split"] = split.sizes()
    ev["probe"] = {"cost_ms_mean": float(cost.mean()), "own_ms_mean": float(own_ms.mean()), "shared_ms_mean": shared_ms,
                   "shared_prefill": "small_direct" in policy.paid_stages, "shared_max_abs_diff": shared_diff,
                   "initial_train_loss": state["initial_loss"], "final_train_loss": final_loss,
                   "train_losses": state["losses"],
                   "calibration_loss": cal_loss, "resumed_from": state.get("resumed_from")}
    policy.metrics = {**_policy_metrics(ev), "probe_cost_ms_mean": float(cost.mean()),
                      "calibration_loss": cal_loss}
    policy.params.update({"probe_ms": {"own_mean": float(own_ms.mean()), "shared_mean": shared_ms},
                          "training": {"epochs": config.epochs, "lr": config.lr, "batch_size": config.batch_size,
                                       "seed": config.seed, "train_losses": state["losses"]}})
    _write(router, ev, out)
    table = format_table(ev) + "\n" + pe.summary_line(ev)
    test = split.test
    return TrainResult(router, ev, out, metadata, labels_hash, test=test, table=table)


def _write(router, ev: dict, out: Path) -> None:
    import json

    from .plot import plot_curve

    out.mkdir(parents=True, exist_ok=True)
    router.save(out / "router")
    (out / "evaluation.json").write_text(json.dumps(ev, indent=2, default=_jsonable) + "\n")
    plot_curve(ev, out / "curve.png")


def _jsonable(o):
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")
