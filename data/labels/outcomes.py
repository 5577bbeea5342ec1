"""Published per-prompt outcome tables -> direct-only labels (`routedvlm labels import-outcomes`).

Two layouts (engines-and-audit notes, "Outcome tables"):
- `routellm` (lm-sys/RouteLLM `evals/<task>/*_responses.csv`): `prompt`, one True/False column per model and
  `<model>_response` (the full answer; a slice may carry only its length, `<model>_response_chars`);
- `mmr-bench`: `question` (or `prompt`), per model `<M>_correct` and `<M>_cost`.
Two models map onto `small_direct` (the cheaper one) and `large_direct`; more than two are refused for now.
Costs (`latency_ms__<s>`): the table's `<M>_cost` (mmr-bench), else the response length in tokens (characters / 4)
x a per-model ms-per-token price (`ms_per_token`; defaults: small 10, large 30). Features: prompt features only
(inference/features.py, the code the runtime runs), the image-free ones.
"""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pandas as pd

from routedvlm.errors import LabelsError

LAYOUTS = ("mmr-bench", "routellm")
DEFAULT_MS_PER_TOKEN = {"small": 10.0, "large": 30.0}
KNOWN_LARGE = ("gpt-4-1106-preview",)  # RouteLLM's strong model: the large side when --small is not given


def model_columns(df: pd.DataFrame, layout: str) -> list[str]:
    """The model names a table holds, in file order."""
    if layout == "routellm":
        return [c for c in df.columns if f"{c}_response" in df.columns or f"{c}_response_chars" in df.columns]
    if layout == "mmr-bench":
        return [c[: -len("_correct")] for c in df.columns if c.endswith("_correct") and f"{c[:-8]}_cost" in df.columns]
    raise LabelsError(f"The `layout` parameter must be one of {', '.join(LAYOUTS)}. Got {layout!r} instead.")


def _bool(series: pd.Series, name: str) -> np.ndarray:
    text = series.astype(str).str.strip().str.lower()
    ok = text.isin(["true", "false", "1", "0", "1.0", "0.0"])
    if not ok.all():
        raise LabelsError(f"Column {name!r} must hold True/False correctness; row {int(np.argmin(ok.to_numpy()))} has "
                          f"{series[~ok].iloc[0]!r}. Check the --layout.")
    return text.isin(["true", "1", "1.0"]).to_numpy()


def _costs(df: pd.DataFrame, layout: str, model: str, ms_per_token: float) -> np.ndarray:
    if layout == "mmr-bench":
        return pd.to_numeric(df[f"{model}_cost"], errors="coerce").to_numpy(dtype=float)
    return response_chars(df, model) / 4.0 * ms_per_token


def response_chars(df: pd.DataFrame, model: str) -> np.ndarray:
    """The length of each response in characters (`<model>_response`, or a slice's `<model>_response_chars`)."""
    if f"{model}_response" in df.columns:
        return df[f"{model}_response"].fillna("").astype(str).str.len().to_numpy(dtype=float)
    return pd.to_numeric(df[f"{model}_response_chars"], errors="coerce").fillna(0).to_numpy(dtype=float)


def import_outcomes(df: pd.DataFrame, layout: str, *, small: str | None = None, dataset: str = "imported",
                    ms_per_token: dict | None = None) -> pd.DataFrame:
    """A direct-only labels table (schema version 1) from an outcome table in `layout` (module docstring).
    `small`: the cheaper model (default: the lower mean cost, or RouteLLM's known weak model)."""
    from routedvlm.data.labels.schema import compute_labels
    from routedvlm.inference.features import compute_features, feature_names

    models = model_columns(df, layout)
    if len(models) != 2:
        raise LabelsError(f"import-outcomes maps exactly two models onto small_direct/large_direct; the table has "
                          f"{len(models)}: {models}. Keep two model columns (N-model import is issue 30).")
    prices = {**DEFAULT_MS_PER_TOKEN, **(ms_per_token or {})}
    question_col = "prompt" if "prompt" in df.columns else "question"
    if question_col not in df.columns:
        raise LabelsError(f"The table has no `prompt` or `question` column (columns: {list(df.columns)[:8]}).")
    if small is None:
        small = _cheaper(df, layout, models)
    if small not in models:
        raise LabelsError(f"`--small` must be one of the table's models {models}. Got {small!r} instead.")
    large = next(m for m in models if m != small)
    questions = df[question_col].fillna("").astype(str)
    ids = [hashlib.sha256(q.encode()).hexdigest()[:16] for q in questions]
    out = pd.DataFrame({"sample_id": [f"{dataset}-{i:05d}-{h}" for i, h in enumerate(ids)], "dataset": dataset,
                        "task_type": "open", "question": questions.to_numpy(), "reference": json.dumps([])})
    for strategy, model, side in (("small_direct", small, "small"), ("large_direct", large, "large")):
        correct = _bool(df[model if layout == "routellm" else f"{model}_correct"], model)
        out[f"answer__{strategy}"] = (df[f"{model}_response"].fillna("").astype(str).str[-200:].to_numpy()
                                      if f"{model}_response" in df.columns else "")
        out[f"correct__{strategy}"] = correct
        out[f"latency_ms__{strategy}"] = _costs(df, layout, model, prices[side])
        out[f"output_tokens__{strategy}"] = np.round(_costs(df, layout, model, 1.0) if layout == "routellm"
                                                     else np.zeros(len(df))).astype(int)
    names = [n for n in feature_names(("prompt",)) if "image" not in n]
    feats = pd.DataFrame([compute_features(q, (), {}, names) for q in questions], index=out.index)
    out = pd.concat([out, feats.astype(float)], axis=1)
    out["label"] = compute_labels(out, ["small_direct", "large_direct"]).to_numpy()
    out.attrs["models"] = {"small": small, "large": large}
    return out


def _cheaper(df: pd.DataFrame, layout: str, models: list[str]) -> str:
    if layout == "routellm":
        known = [m for m in models if m.split("/")[-1] in KNOWN_LARGE]
        if len(known) == 1:
            return next(m for m in models if m not in known)
        raise LabelsError(f"Cannot tell which of {models} is the cheaper model; name it with --small.")
    means = {m: float(pd.to_numeric(df[f"{m}_cost"], errors="coerce").mean()) for m in models}
    return min(models, key=lambda m: means[m])


def outcome_metadata(labels: pd.DataFrame, layout: str, source: str) -> dict:
    """The `routedvlm` parquet metadata of imported labels."""
    models = labels.attrs.get("models", {})
    return {"models": {k: {"name": v, "revision": None, "dtype": "n/a", "device": "n/a"} for k, v in models.items()},
            "candidates": ["small_direct", "large_direct"], "prompt_template": {"name": "none", "text": None,
                                                                                "instructions": None},
            "execution": f"imported outcome table ({layout})", "source_path": str(source),
            "costs": "response tokens (chars / 4) x ms per token" if layout == "routellm" else "the table's cost"}
