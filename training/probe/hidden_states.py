"""The self-probe's input, recomputed: the large model's hidden state of its own `large_direct` pass on every labelled
row, through `CollaborativePipeline.run` — the code path RoutedVLM runs — with the large model in transformers
(`routedvlm.inference.sides.local.hidden` hooks) or on an in-process vLLM engine (vLLM's hidden-state extraction,
`inference/sides/vllm/hidden.py`; the rows are submitted at once and batched by the engine). Both give the same
vectors within float32 rounding (tests/inference/test_vllm_hidden.py).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from routedvlm.errors import ConfigError, TrainingError
from routedvlm.router.self_probe import HIDDEN_KEY
from routedvlm.router.strategies import LARGE_DIRECT

log = logging.getLogger(__name__)


@dataclass
class HiddenInfo:
    """What the hidden column of a training table holds, and how it was made."""

    layers: list
    position: str
    size: int
    large_model: str
    large_hash: str | None
    seconds: float
    answers_equal: int
    rows: int
    layer_scores: dict | None = None  # candidate layer -> training-split CV log loss (choose_layer)
    side: str = "transformers"  # what computed them: "transformers" or "vllm-engine" (vLLM's hidden-state extraction)

    def params(self) -> dict:
        return {"hidden": {"layers": self.layers, "position": self.position, "size": self.size,
                           **({"layer_cv_log_loss": self.layer_scores} if self.layer_scores else {})},
                "large_model": self.large_model, "large_hash": self.large_hash,
                "recomputed": {"seconds": round(self.seconds, 2), "rows": self.rows, "side": self.side,
                               "answers_equal_labels": self.answers_equal}}


def large_kind(config, metadata: dict):
    """The spec table's kind of the large side whose states are read (`inference/sides/kinds.py`): that of --large, or
    with no --large the kind the labels recorded for their large side."""
    from routedvlm.inference.sides.kinds import described_kind, side_kind

    given = getattr(config, "large", None)
    return side_kind(str(given)) if given else described_kind((metadata.get("models") or {}).get("large") or {})


def large_on_engine(config, metadata: dict) -> bool:
    """Whether the hidden states are recomputed on an in-process engine that batches (vLLM's hidden-state extraction:
    `--large vllm:<folder>`, or no --large and the labels' large side was such an engine). Otherwise transformers in
    this process."""
    kind = large_kind(config, metadata)
    return kind.batching and kind.hidden_states and not kind.remote


def resolve_large(config, metadata: dict) -> Path:
    """The large VLM checkpoint whose hidden states the probe reads: --large (a folder, or 'vllm:<folder>'), else the
    labels' large model found by `locate_checkpoint` (its recorded path, or a shipped toy checkpoint with the same
    weights hash); a vLLM engine side records its checkpoint folder like a local one."""
    from routedvlm.inference.sides.kinds import side_kind
    from routedvlm.router.checkpoints import locate_checkpoint, recorded_weights

    large = (metadata.get("models") or {}).get("large") or {}
    given = getattr(config, "large", None)
    if given:
        given = side_kind(str(given)).target(str(given))
    if not given and (large.get("server") or large.get("device") == "remote"):
        raise ConfigError(f"The self-probe reads the large VLM's hidden states, and the labels' large model was served "
                          f"over HTTP ({large.get('server')}, model {large.get('model_id')!r}): a server returns no "
                          "hidden states. Pass --large FOLDER (transformers) or --large vllm:FOLDER (an in-process vLLM "
                          "engine) with the same checkpoint on this machine.")
    return locate_checkpoint(large.get("name"), recorded_weights(large),
                             given=given, flag="--large", what="The self-probe's large model (the labels' large side)")


def _engine_kind():
    """The spec table's in-process batching kind that returns hidden states (the vLLM engine)."""
    from routedvlm.inference.sides.kinds import KINDS

    return next(k for k in KINDS if k.batching and k.hidden_states and not k.remote)


def _pipeline(large_path: Path, metadata: dict, engine: bool = False):
    """(pipeline, large side): the large model as a transformers `VLM`, or as an in-process engine side (`engine`)."""
    from routedvlm.inference import CollaborativePipeline
    from routedvlm.inference.pipeline_parts import PipelineConfig
    from routedvlm.inference.prompts import PromptConfig
    from routedvlm.inference.sides import load_side
    from routedvlm.inference.sides.kinds import LOCAL

    prompts = metadata.get("prompts")
    prompts = PromptConfig(**prompts) if prompts else None
    side = load_side((_engine_kind() if engine else LOCAL).spec(large_path), prompts=prompts)
    gen = {k: v for k, v in (metadata.get("generation") or {}).items() if k in
           ("max_direct_tokens", "max_reason_tokens", "min_new_tokens", "min_reason_tokens")}
    return CollaborativePipeline(side, side, config=PipelineConfig(**gen)), side


def n_layers_of(large_path: Path) -> int | None:
    """The text decoder's layer count from the checkpoint's config.json (None when it names none)."""
    import json

    text = json.loads((Path(large_path) / "config.json").read_text())
    n = (text.get("text_config") or text).get("num_hidden_layers")
    return int(n) if n else None


def _large_direct_runs(pipe, rows, engine: bool, progress: bool):
    """The large_direct result of every (image, question) row; an engine side (not stateful) gets them all at once,
    so vLLM batches them, and each result still carries its own hidden states."""
    from tqdm.auto import tqdm

    bar = tqdm(total=len(rows), desc="large_direct hidden states", unit="sample", disable=not progress)
    if not engine:
        out = []
        for image, question in rows:
            out.append(pipe.run(image, question, LARGE_DIRECT))
            bar.update()
        bar.close()
        return out
    from concurrent.futures import ThreadPoolExecutor

    def one(row):
        result = pipe.run(row[0], row[1], LARGE_DIRECT)
        bar.update()
        return result

    # the first row alone: it starts the engine (built on a side's first call), which threads must not race to do
    out = [one(rows[0])] if rows else []
    with ThreadPoolExecutor(max_workers=min(16, max(1, len(rows)))) as pool:
        out += list(pool.map(one, rows[1:]))
    bar.close()
    return out


def attach_hidden(data: pd.DataFrame, metadata: dict, large_path: Path, layers, position: str,
                  progress: bool = True, engine: bool = False) -> tuple[pd.DataFrame, HiddenInfo]:
    """`data` (labels + `image`, `question`) with a `HIDDEN_KEY` column: the large model's hidden-state vector of
    its large_direct pass on each row, from the same pipeline code RoutedVLM runs — with transformers in this process,
    or (`engine`) with vLLM's hidden-state extraction on an in-process engine."""
    import time

    from routedvlm.inference.sides.kinds import LOCAL
    from routedvlm.inference.sides.vllm.hidden import normalize_layers
    from routedvlm.router.checkpoints import portable_path, weights_hash

    layers = normalize_layers(list(layers), n_layers_of(large_path) or max(abs(x) for x in layers) + 1)
    pipe, side = _pipeline(large_path, metadata, engine)
    side.capture_hidden(layers)
    t0 = time.perf_counter()
    labelled = list(data.get(f"answer__{LARGE_DIRECT}", [None] * len(data)))
    try:
        side.start()
        results = _large_direct_runs(pipe, list(zip(data["image"], data["question"])), engine, progress)
    finally:
        side.close()
    vectors, same = [], 0
    for result, answer in zip(results, labelled):
        hidden = getattr(result.generation, "hidden", None)
        if hidden is None:
            raise TrainingError(f"The large model {str(large_path)!r} returned no hidden states for its large_direct "
                                "pass; the self-probe needs a local transformers model or a vLLM engine side.")
        vectors.append(hidden.vector(position, layers))
        same += int(answer is not None and result.answer == answer)
    seconds = time.perf_counter() - t0
    if same < len(results):
        log.warning("the recomputed large_direct answer differs from the labels' on %d of %d rows: the large model or "
                    "its settings may differ from the labelling run", len(results) - same, len(results))
    out = data.copy()
    out[HIDDEN_KEY] = pd.Series(vectors, index=data.index, dtype=object)
    info = HiddenInfo(layers, position, int(vectors[0].shape[0]) if vectors else 0, portable_path(large_path),
                      weights_hash(large_path), seconds, same, len(results), side=(_engine_kind() if engine else LOCAL).runtime)
    log.info("hidden states of %d rows (layers %s, %s, %d values, %s) in %.1f s; %d/%d answers equal the labels'",
             len(results), layers, position, info.size, info.side, seconds, same, len(results))
    return out, info
