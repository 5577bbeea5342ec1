"""Fine-tune the probe (LoRA adapter + head) with BCE on `correct__<s>` per candidate, epoch checkpoints, resume.

A checkpoint is `checkpoints/epoch-NNN/`: the adapter + head as the router saves them, `optimizer.safetensors`
(AdamW moments; param groups in its metadata) and `state.json` (epoch, loss history, what was trained). No pickle.
Samples are encoded once; each step accumulates `batch_size` single-sample forwards (VLM inputs differ in length).
The sample order of epoch e is a permutation seeded by (seed, e), so a resumed run matches an uninterrupted one.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from pathlib import Path

import numpy as np

from routedvlm.errors import TrainingError

log = logging.getLogger(__name__)
STATE_FILE, OPTIM_FILE = "state.json", "optimizer.safetensors"


def encode_rows(net, df, *, progress: bool = True) -> list[dict]:
    """Per row: model inputs of its prompt, its features dict and its targets (P(correct) labels)."""
    from tqdm.auto import tqdm

    out = []
    rows = df.to_dict(orient="records")
    for r in tqdm(rows, desc="encoding samples", unit="sample", file=sys.stderr, disable=not progress, leave=False):
        targets = [float(bool(r[f"correct__{s}"])) for s in net.strategies]
        out.append({"inputs": net.encode(r["image"], r["question"]), "row": r, "y": targets})
    return out


def set_feature_scaling(net, df) -> None:
    """Standardise the head's stage features with the training rows' mean and std (NaN ignored)."""
    import torch

    if not net.features:
        return
    x = df[net.features].to_numpy(dtype=float)
    mean, std = np.nanmean(x, axis=0), np.nanstd(x, axis=0)
    std = np.where(np.isfinite(std) & (std > 1e-6), std, 1.0)
    net.feat_mean = torch.tensor(np.nan_to_num(mean), dtype=torch.float32)
    net.feat_std = torch.tensor(std, dtype=torch.float32)


def loss_of(net, item):
    import torch

    h = net.hidden(item["inputs"])
    logits = net.logits(h, net.feature_tensor([item["row"]]))
    y = torch.tensor([item["y"]], dtype=torch.float32)
    return torch.nn.functional.binary_cross_entropy_with_logits(logits, y)


def mean_loss(net, items) -> float:
    import torch

    net.eval()
    with torch.inference_mode():
        return float(np.mean([loss_of(net, it).item() for it in items])) if items else float("nan")


# ---- checkpoints ----
def _epoch_dir(root: Path, epoch: int) -> Path:
    return root / f"epoch-{epoch:03d}"


def latest_checkpoint(root: Path) -> Path | None:
    done = sorted(p for p in root.glob("epoch-*") if (p / STATE_FILE).is_file()) if root.is_dir() else []
    return done[-1] if done else None


def save_checkpoint(root: Path, epoch: int, net, optimizer, state: dict) -> Path:
    """Write epoch `epoch` into a temp folder and rename it (a killed run leaves only whole checkpoints)."""
    from safetensors.torch import save_file

    final = _epoch_dir(root, epoch)
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    net.save(tmp)
    sd = optimizer.state_dict()
    tensors = {f"{i}.{k}": v.detach().cpu().contiguous() for i, st in sd["state"].items() for k, v in st.items()
               if hasattr(v, "detach")}
    save_file(tensors, str(tmp / OPTIM_FILE), metadata={"param_groups": json.dumps(sd["param_groups"])})
    (tmp / STATE_FILE).write_text(json.dumps({**state, "epoch": epoch}, indent=2) + "\n")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    return final


def load_checkpoint(path: Path, net, optimizer, expected: dict) -> dict:
    """Load a checkpoint into `net` and `optimizer`; TrainingError when it was made for another probe."""
    from safetensors import safe_open

    state = json.loads((path / STATE_FILE).read_text())
    diff = sorted(k for k, v in expected.items() if state.get(k) != v)
    if diff:
        raise TrainingError(f"The checkpoint {path} was made with other {diff} than this run "
                            f"({ {k: state.get(k) for k in diff} } vs { {k: expected[k] for k in diff} }). "
                            "Resume with the same settings, or use a new --output-dir.")
    net.load_weights(path)
    with safe_open(str(path / OPTIM_FILE), framework="pt") as fh:
        groups = json.loads(fh.metadata()["param_groups"])
        per: dict = {}
        for key in fh.keys():
            i, name = key.split(".", 1)
            per.setdefault(int(i), {})[name] = fh.get_tensor(key)
    optimizer.load_state_dict({"state": per, "param_groups": groups})
    return state


def _start_state(net, optimizer, checkpoints: Path, resume: bool, identity: dict) -> dict:
    """A fresh training state, or (with `resume`) the last checkpoint's, loaded into `net` and `optimizer`."""
    last = latest_checkpoint(checkpoints) if resume else None
    if resume and last is None:
        log.warning("--resume: no checkpoint in %s; training from the start", checkpoints)
    if last is None:
        return {"losses": [], "initial_loss": None, "resumed_from": None, **identity}
    state = {**load_checkpoint(last, net, optimizer, identity), "resumed_from": last.name}
    log.info("resumed from %s (epoch %d)", last, state["epoch"])
    return state


def fit_probe(net, train_items, *, epochs: int, lr: float, batch_size: int, seed: int, checkpoints: Path,
              resume: bool, identity: dict, progress: bool = True) -> dict:
    """Train in place; returns {"losses": [mean train loss per epoch], "initial_loss", "resumed_from"}."""
    import torch
    from tqdm.auto import tqdm

    optimizer = torch.optim.AdamW(net.trainable(), lr=lr, weight_decay=0.0)
    state = _start_state(net, optimizer, checkpoints, resume, identity)
    start = state.get("epoch", 0)
    if state["initial_loss"] is None:
        state["initial_loss"] = mean_loss(net, train_items)
    for epoch in range(start + 1, epochs + 1):
        order = np.random.default_rng([seed, epoch]).permutation(len(train_items))
        net.train()
        total, bar = 0.0, tqdm(total=len(order), desc=f"probe epoch {epoch}/{epochs}", unit="sample",
                               file=sys.stderr, disable=not progress, dynamic_ncols=True)
        for b in range(0, len(order), batch_size):
            batch = order[b:b + batch_size]
            optimizer.zero_grad(set_to_none=True)
            for i in batch:
                loss = loss_of(net, train_items[i])
                (loss / len(batch)).backward()
                total += loss.item()
            optimizer.step()
            bar.update(len(batch))
            bar.set_postfix(loss=f"{total / min(b + batch_size, len(order)):.4f}", refresh=False)
        bar.close()
        net.eval()
        state["losses"].append(total / max(len(order), 1))
        save_checkpoint(checkpoints, epoch, net, optimizer, state)
        log.info("epoch %d: mean train loss %.4f (checkpoint saved)", epoch, state["losses"][-1])
    net.eval()
    return state
