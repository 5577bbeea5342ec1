"""The LoRA probe's model files: `adapter/` (peft LoRA weights + config) and `head.safetensors` (head + feature scaling).

Loading takes the bytes from a reader (integrity.read_verified: the bytes whose sha256 was checked) and refuses,
as RouterLoadError, tensors that do not fit the probe (names, shapes) or are not finite. No pickle.
"""
from __future__ import annotations

import json
from pathlib import Path

from routedvlm.errors import RouterLoadError

ADAPTER_DIR, HEAD_FILE = "adapter", "head.safetensors"
ADAPTER_WEIGHTS, ADAPTER_CONFIG = "adapter_model.safetensors", "adapter_config.json"
ADAPTED = r"self_attn\.(q_proj|o_proj)|mlp\.(gate_proj|up_proj|down_proj)"


def target_regex(model) -> str:
    """peft `target_modules` regex: q/o projections and MLP of the language model's last decoder layer."""
    last = model.config.get_text_config().num_hidden_layers - 1
    return rf"^model\.(language_model|text_model)\.layers\.{last}\.({ADAPTED})$"


def adapter_files(adapter: str) -> list[str]:
    """The files of the adapter folder `adapter` that belong to the artifact (peft's README.md does not)."""
    return [f"{adapter}/{ADAPTER_WEIGHTS}", f"{adapter}/{ADAPTER_CONFIG}"]


def save_probe(net, directory: Path) -> dict:
    """Write the adapter (if any) and the head of `net`; returns the policy params that name them."""
    from safetensors.torch import save_file

    if net.peft is not None:
        net.peft.save_pretrained(str(directory / ADAPTER_DIR))
    elif net._adapter is not None:  # weights shared with RoutedVLM's small model: write the same folder
        conf, state = net._adapter
        conf.save_pretrained(str(directory / ADAPTER_DIR))
        save_file({"base_model.model." + k: v.detach().cpu().contiguous() for k, v in state.items()},
                  str(directory / ADAPTER_DIR / ADAPTER_WEIGHTS))
    tensors = {f"head.{k}": v.detach().cpu().contiguous() for k, v in net.head.state_dict().items()}
    tensors.update(feat_mean=net.feat_mean.contiguous(), feat_std=net.feat_std.contiguous())
    meta = {"strategies": net.strategies, "features": net.features, "head_hidden": net.head_hidden}
    save_file(tensors, str(directory / HEAD_FILE), metadata={"routedvlm": json.dumps(meta)})
    return {"adapter": ADAPTER_DIR if net.lora_r > 0 else None, "head": HEAD_FILE,
            "lora": {"r": net.lora_r, "alpha": net.lora_alpha, "target_modules": target_regex(net.vlm.model)},
            "head_hidden": net.head_hidden}


def load_probe(net, read, *, head: str = HEAD_FILE, adapter: str | None = ADAPTER_DIR) -> None:
    """Load the adapter (when `net` has one) and the head into `net`; `read(rel) -> bytes` reads a model file."""
    from safetensors import SafetensorError
    from safetensors.torch import load

    try:
        if net.peft is not None:
            _load_adapter(net, load(read(f"{adapter or ADAPTER_DIR}/{ADAPTER_WEIGHTS}")))
        tensors = load(read(head))
        n_f = len(net.features)
        scaling = {k: tensors.get(k) for k in ("feat_mean", "feat_std")}
        bad = [k for k, v in scaling.items() if v is None or tuple(v.shape) != (n_f,)]
        if bad:
            raise ValueError(f"{bad} must be vectors of the {n_f} feature(s)")
        _check_finite({**tensors}, head)
        net.head.load_state_dict({k[5:]: v for k, v in tensors.items() if k.startswith("head.")})
    except (SafetensorError, RuntimeError, ValueError, KeyError, TypeError) as exc:
        raise RouterLoadError(f"The probe's weights do not load ({type(exc).__name__}: {str(exc)[:300]}). "
                              "Re-export the router with train-router --router lora-probe.") from None
    net.feat_mean, net.feat_std = scaling["feat_mean"], scaling["feat_std"]


def _load_adapter(net, state: dict) -> None:
    from peft.utils import get_peft_model_state_dict, set_peft_model_state_dict

    want = {k: tuple(v.shape) for k, v in get_peft_model_state_dict(net.peft).items()}
    got = {k: tuple(v.shape) for k, v in state.items()}
    if got != want:
        diff = sorted(set(want) ^ set(got)) or sorted(k for k in want if want[k] != got[k])
        raise ValueError(f"the adapter's tensors do not fit the probe's LoRA layers (e.g. {diff[:3]})")
    _check_finite(state, ADAPTER_WEIGHTS)
    set_peft_model_state_dict(net.peft, state)


def _check_finite(tensors: dict, where: str) -> None:
    import torch

    bad = sorted(k for k, v in tensors.items() if v.is_floating_point() and not bool(torch.isfinite(v).all()))
    if bad:
        raise ValueError(f"{where} holds NaN or infinite values in {bad[:5]}")


def read_plain(directory) -> callable:
    """A reader for files of `directory` that checks nothing (the probe's own training checkpoints)."""
    return lambda rel: (Path(directory) / rel).read_bytes()
