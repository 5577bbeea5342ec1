"""Hidden states from an in-process vLLM engine (the self-probe with a vLLM large side), saved by vLLM's hidden-state
extraction during the pass that answers — no second forward pass.

`engine_kwargs(layers, storage_dir)` are the extra `vllm.LLM` arguments that switch it on (the `extract_hidden_states`
speculative method, which caches the chosen layers' outputs in a KV-cache group, and a KV connector that writes them
to `storage_dir/<request id>.safetensors`); `read_hidden(request_output, layers)` turns one finished request into the
`HiddenStates` the transformers side captures (`routedvlm.inference.sides.local.hidden`): per decoder layer i, its output at the
last prompt token and at every answer token fed back while decoding.

Layer ids: transformers decoder layer i (0-based, the output of layer i) is vLLM's aux hidden-state layer i + 1 (vLLM
records the residual stream entering layer k; k = number of layers gives the last layer's output, before the final
norm — the transformers hook captures the same). Qwen3-VL's deepstack adds visual features after early layers at the
image positions only, which neither vector reads.

`CPUHiddenStatesConnector` (built on first access, so importing this module needs no vLLM) is vLLM's
`ExampleHiddenStatesConnector` without CUDA: the stock one stages the copy in pinned memory on a CUDA stream, which
fails on vLLM's CPU build (`pin_memory=True requires a CUDA or other accelerator backend`). It copies the rows out of
the cache and writes the file synchronously, then releases the lock readers wait on. On a GPU it works as well (the
copy is then a blocking device-to-host copy); pass `connector="ExampleHiddenStatesConnector"` to use vLLM's own.
"""
from __future__ import annotations

import os
from pathlib import Path

from routedvlm.errors import ConfigError, ModelLoadError

from ..local.hidden import normalize_layers  # noqa: F401 - the rule of the transformers side, re-exported for the engine

CONNECTOR = "CPUHiddenStatesConnector"
STOCK_CONNECTOR = "ExampleHiddenStatesConnector"
PATH_KEY = "hidden_states_path"


def aux_layer_ids(layers) -> list[int]:
    """vLLM aux hidden-state layer ids of transformers decoder layers `layers` (non-negative, as resolved)."""
    return [int(layer) + 1 for layer in sorted(set(layers))]


def supports_extraction(architectures) -> bool:
    """Whether vLLM can extract hidden states from a checkpoint of `architectures` (config.json): its model class
    implements vLLM's EAGLE3 interface (Qwen3-VL, Qwen2.5-VL: yes; Qwen2-VL: no). Imports vLLM."""
    from vllm.model_executor.models import ModelRegistry
    from vllm.model_executor.models.interfaces import supports_eagle3

    for arch in architectures or ():
        model = ModelRegistry.models.get(arch)
        if model is not None:
            return bool(supports_eagle3(model.load_model_cls()))
    return False


def engine_kwargs(layers, storage_dir, *, connector: str = CONNECTOR) -> dict:
    """Extra `vllm.LLM(...)` kwargs that save the outputs of decoder `layers` (non-negative transformers indices) of
    every request's prompt and answer tokens under `storage_dir`. The model must implement vLLM's EAGLE3 interface
    (Qwen3-VL, Qwen2.5-VL, ...; not Qwen2-VL)."""
    if not layers:
        raise ConfigError("engine_kwargs needs at least one decoder layer to capture. Got none.")
    storage = Path(storage_dir).expanduser().resolve()
    storage.mkdir(parents=True, exist_ok=True)
    module = {} if connector == STOCK_CONNECTOR else {"kv_connector_module_path": __name__}
    return {
        "speculative_config": {"method": "extract_hidden_states", "num_speculative_tokens": 1,
                               "draft_model_config": {"hf_config": {
                                   "eagle_aux_hidden_state_layer_ids": aux_layer_ids(layers)}}},
        "kv_transfer_config": {"kv_connector": connector, "kv_role": "kv_producer", **module,
                               "kv_connector_extra_config": {"shared_storage_path": str(storage)}},
    }


def request_params() -> dict:
    """`SamplingParams.extra_args` that make the connector keep the answer tokens' states too (not only the prompt's)."""
    return {"kv_transfer_params": {"include_output_tokens": True}}


def hidden_path(request_output) -> str:
    params = getattr(request_output, "kv_transfer_params", None) or {}
    path = params.get(PATH_KEY)
    if not path:
        raise ModelLoadError(f"The vLLM request {getattr(request_output, 'request_id', '?')!r} returned no "
                             f"{PATH_KEY!r}: start the engine with `engine_kwargs(layers, folder)` (hidden-state "
                             "extraction) to read the large model's hidden states.")
    return str(path)


def load_states(path: str, *, keep: bool = False) -> dict:
    """The saved tensors {"hidden_states": [tokens, layers, hidden], "token_ids": [tokens]}; waits for the writer's
    lock, then removes the file (and its lock) unless `keep`."""
    import fcntl

    from safetensors.torch import load_file

    lock = path + ".lock"
    try:
        if os.path.exists(lock):
            with open(lock) as fh:
                fcntl.flock(fh, fcntl.LOCK_SH)
                data = load_file(path, device="cpu")
        else:
            data = load_file(path, device="cpu")
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"Cannot read the hidden states vLLM saved at {path}: {exc}") from None
    finally:
        for name in (lock, *(() if keep else (path,))):
            if os.path.exists(name):
                os.remove(name)
    return data


def read_hidden(request_output, layers, *, keep: bool = False):
    """The `HiddenStates` of one finished vLLM request (`RequestOutput`) whose engine captured `layers`
    (non-negative transformers indices, as given to `engine_kwargs`): `prompt_last[i]` = layer i at the last prompt
    token, `answer[i]` = layer i at the answer tokens fed back (all but the last), float32 numpy — what
    `Generation.hidden` holds on the transformers side."""
    import numpy as np

    from ..local.hidden import HiddenStates

    data = load_states(hidden_path(request_output), keep=keep)
    states = data["hidden_states"].float().numpy()
    layers = sorted(set(int(x) for x in layers))
    n_prompt = len(request_output.prompt_token_ids or [])
    if states.ndim != 3 or states.shape[1] != len(layers) or not 0 < n_prompt <= states.shape[0]:
        raise ModelLoadError(f"The hidden states vLLM saved have shape {tuple(states.shape)}; expected [tokens >= "
                             f"{n_prompt}, {len(layers)} layers, hidden] for layers {layers}. Was the engine started "
                             "with engine_kwargs for these layers?")
    prompt_last = {layer: np.ascontiguousarray(states[n_prompt - 1, j]) for j, layer in enumerate(layers)}
    answer = {layer: np.ascontiguousarray(states[n_prompt:, j]) for j, layer in enumerate(layers)}
    return HiddenStates(layers, prompt_last, answer)


def _connector_class():
    """`ExampleHiddenStatesConnector` with a synchronous, CUDA-free copy and write (see the module docstring)."""
    import fcntl

    import torch
    from safetensors.torch import save_file
    from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
        ExampleHiddenStatesConnector, extract_from_kv_cache)

    class _Done:
        """Stands in for the stock connector's CUDA event: the copy is complete when the write is submitted."""

        def query(self) -> bool:
            return True

        def synchronize(self) -> None:
            return None

    class CPUHiddenStatesConnector(ExampleHiddenStatesConnector):
        def _submit_async_write(self, pending) -> None:
            if not self._is_tp_rank_zero:
                return
            blocks = torch.tensor(pending.block_ids, dtype=torch.long)
            offsets = torch.arange(self._block_size, dtype=torch.long)
            slots = (offsets.reshape(1, -1) + blocks.reshape(-1, 1) * self._block_size).flatten()
            num_tokens = pending.token_ids.shape[0]
            states = extract_from_kv_cache(self._kv_cache, slots.to(self._kv_cache.device), num_tokens)
            tensors = {"hidden_states": states.to("cpu").clone().contiguous(), "token_ids": pending.token_ids.clone()}
            os.makedirs(os.path.dirname(pending.filename) or ".", exist_ok=True)
            lock_fd = self._lock_fds.pop(pending.req_id, None)
            if lock_fd is None and self.use_lock:
                lock_fd = os.open(pending.filename + ".lock", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
                fcntl.flock(lock_fd, fcntl.LOCK_EX)
            try:
                save_file(tensors, pending.filename)
            finally:
                if lock_fd is not None:
                    os.close(lock_fd)
            self._req_copy_events[pending.req_id] = _Done()

    CPUHiddenStatesConnector.__module__ = __name__
    return CPUHiddenStatesConnector


def __getattr__(name: str):
    if name == CONNECTOR:  # vLLM loads the connector as getattr(import_module(kv_connector_module_path), name)
        cls = _connector_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
