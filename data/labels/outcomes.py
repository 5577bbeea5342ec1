"""Published per-prompt outcome tables -> direct-only labels (`routedvlm labels import-outcomes`).

Three layouts (engines-and-audit notes, "Outcome tables"), each with one correctness and one cost (or response
length) column per model, N >= 2 models:
- `routellm` (lm-sys/RouteLLM `evals/<task>/*_responses.csv`): `prompt`, one True/False column per model and
  `<model>_response` (the full answer; a slice may carry only its length, `<model>_response_chars`);
- `mmr-bench`: `question` (or `prompt`), per model `<M>_correct` and `<M>_cost`;
- `routerbench` (withmartian/routerbench, its wide table saved as CSV or parquet; the published pickle is not read):
  `sample_id`, `prompt` (the repr of a list of turns, joined), `eval_name`, per model `<M>` (a score in [0, 1];
  correct when >= `min_score`), `<M>|model_response` and `<M>|total_cost`.
The models, ordered cheapest first (`order`, or by mean cost), map onto the ladder aliases (`small`, `mid`/`mid<i>`,
`large`: `router/strategies.ladder_aliases`) as `<alias>_direct`. Costs (`latency_ms__<s>`): the table's cost column
(mmr-bench, routerbench), else the response length in tokens (characters / 4) x a ms-per-token price per alias or
model name (`ms_per_token`; defaults: small 10, large 30, middle models evenly between); or, for a table with
correctness columns but no response or cost column (RouteLLM publishes such tables), a fixed cost per call given per
model (`cost_ms`, the CLI's `--cost-ms`), which also orders the models when `order` is not given. Features: prompt
features only (inference/features.py, the code the runtime runs), the image-free ones; `with_meaning` adds the meaning
features of an encoder (inference/encoders).
"""
from __future__ import annotations

import ast
import hashlib
import json

import numpy as np
import pandas as pd

from routedvlm.errors import LabelsError

from .outcome_checks import check_flags, check_table

LAYOUTS = ("mmr-bench", "routellm", "routerbench")
DEFAULT_MS_PER_TOKEN = {"small": 10.0, "large": 30.0}
KNOWN_LARGE = ("gpt-4-1106-preview",)  # RouteLLM's strong model: the large side when no order is given
ROUTERBENCH_COST, ROUTERBENCH_RESPONSE = "|total_cost", "|model_response"


def model_columns(df: pd.DataFrame, layout: str, cost_ms: dict | None = None) -> list[str]:
    """The model names a table holds, in file order (with `cost_ms`: also the models it names that have only a
    correctness column)."""
    if cost_ms and layout in ("routellm", "mmr-bench"):
        named = [c for c in df.columns if c in cost_ms or (layout == "mmr-bench" and c.endswith("_correct")
                                                           and c[: -len("_correct")] in cost_ms)]
        return [c[: -len("_correct")] if layout == "mmr-bench" and c not in cost_ms else c for c in named]
    if layout == "routellm":
        return [c for c in df.columns if f"{c}_response" in df.columns or f"{c}_response_chars" in df.columns]
    if layout == "mmr-bench":
        return [c[: -len("_correct")] for c in df.columns if c.endswith("_correct") and f"{c[:-8]}_cost" in df.columns]
    if layout == "routerbench":
        return [c for c in df.columns if f"{c}{ROUTERBENCH_COST}" in df.columns and c in df.columns]
    raise LabelsError(f"The `layout` parameter must be one of {', '.join(LAYOUTS)}. Got {layout!r} instead.")


def _bool(series: pd.Series, name: str) -> np.ndarray:
    text = series.astype(str).str.strip().str.lower()
    ok = text.isin(["true", "false", "1", "0", "1.0", "0.0"])
    if not ok.all():
        raise LabelsError(f"Column {name!r} must hold True/False correctness; row {int(np.argmin(ok.to_numpy()))} has "
                          f"{series[~ok].iloc[0]!r}. Check the --layout.")
    return text.isin(["true", "1", "1.0"]).to_numpy()


def _correct(df: pd.DataFrame, layout: str, model: str, min_score: float) -> np.ndarray:
    if layout == "routellm":
        return _bool(df[model], model)
    if layout == "mmr-bench":
        return _bool(df[f"{model}_correct"], f"{model}_correct")
    score = pd.to_numeric(df[model], errors="coerce").to_numpy(dtype=float)
    bad = np.isnan(score) | (score < 0) | (score > 1)
    if bad.any():
        raise LabelsError(f"Column {model!r} must hold scores in [0, 1] (RouterBench layout); row {int(np.argmax(bad))} "
                          f"has {df[model].iloc[int(np.argmax(bad))]!r}. Drop those rows or check the --layout.")
    return score >= min_score


def _costs(df: pd.DataFrame, layout: str, model: str, ms_per_token: float) -> np.ndarray:
    if layout == "mmr-bench":
        return pd.to_numeric(df[f"{model}_cost"], errors="coerce").to_numpy(dtype=float)
    if layout == "routerbench":
        return pd.to_numeric(df[f"{model}{ROUTERBENCH_COST}"], errors="coerce").to_numpy(dtype=float)
    return response_chars(df, model) / 4.0 * ms_per_token


def response_chars(df: pd.DataFrame, model: str) -> np.ndarray:
    """The length of each response in characters (`<model>_response`, or a slice's `<model>_response_chars`)."""
    if f"{model}_response" in df.columns:
        return df[f"{model}_response"].fillna("").astype(str).str.len().to_numpy(dtype=float)
    return pd.to_numeric(df[f"{model}_response_chars"], errors="coerce").fillna(0).to_numpy(dtype=float)


def _cost_columns(df: pd.DataFrame, layout: str, models) -> list[str]:
    """The table's cost (or response-length) columns of `models` (checked by outcome_checks.check_table)."""
    suffix = {"mmr-bench": "_cost", "routerbench": ROUTERBENCH_COST, "routellm": "_response_chars"}[layout]
    return [f"{m}{suffix}" for m in models if f"{m}{suffix}" in df.columns]


def _responses(df: pd.DataFrame, layout: str, model: str):
    col = f"{model}{ROUTERBENCH_RESPONSE}" if layout == "routerbench" else f"{model}_response"
    return df[col].fillna("").astype(str).str[-200:].to_numpy() if col in df.columns else ""


def _prompt_text(raw) -> str:
    """RouterBench stores a prompt as the repr of its list of turns; other text is kept as it is."""
    text = "" if raw is None or (isinstance(raw, float) and np.isnan(raw)) else str(raw)
    if text.startswith("["):
        try:
            turns = ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):  # e.g. '[' + 200,000 '-' + '1]': kept as text
            return text
        if isinstance(turns, (list, tuple)):
            return "\n\n".join(str(t) for t in turns)
    return text


def default_prices(aliases) -> dict[str, float]:
    """ms per response token of each alias: small 10, large 30, the middle ones evenly between."""
    lo, hi, n = DEFAULT_MS_PER_TOKEN["small"], DEFAULT_MS_PER_TOKEN["large"], len(aliases)
    return {a: lo + (hi - lo) * i / (n - 1) for i, a in enumerate(aliases)}


def import_outcomes(df: pd.DataFrame, layout: str, *, order=None, small: str | None = None, dataset: str = "imported",
                    ms_per_token: dict | None = None, min_score: float = 0.5,
                    cost_ms: dict | None = None) -> pd.DataFrame:
    """A direct-only labels table from an outcome table in `layout` (module docstring). `order`: the table's models
    cheapest first (all of them or the ones to keep; default: by mean cost, or RouteLLM's known strong model last for
    two); `small`: the cheaper model of a two-model table (the older spelling of `order`). The ladder is in
    `labels.attrs["ladder"]` (aliases) and `labels.attrs["models"]` (alias -> the table's model name)."""
    from routedvlm.data.labels.schema import compute_labels
    from routedvlm.inference.features import compute_features, feature_names
    from routedvlm.router.strategies import MAX_LADDER, ladder_aliases

    check_flags(min_score, ms_per_token)
    cost_ms = _check_costs(df, layout, cost_ms)
    found = model_columns(df, layout, cost_ms)
    if not found and layout == "routellm":
        raise LabelsError(no_cost_message(df))
    models = _ordered(df, layout, found, order, small, cost_ms)
    if not 2 <= len(models) <= MAX_LADDER:
        raise LabelsError(f"import-outcomes needs 2 to {MAX_LADDER} model columns; the table has {len(models)}: "
                          f"{models}. Check the --layout, or keep fewer models with --order.")
    aliases = ladder_aliases(len(models))
    prices = {**default_prices(aliases), **(ms_per_token or {})}
    unknown = sorted(set(ms_per_token or {}) - set(aliases) - set(models))
    if unknown:
        raise LabelsError(f"`--ms-per-token` names {unknown}, which are neither ladder aliases {list(aliases)} nor "
                          f"models of the table {models}.")
    question_col = "prompt" if "prompt" in df.columns else "question"
    if question_col not in df.columns:
        raise LabelsError(f"The table has no `prompt` or `question` column (columns: {list(df.columns)[:8]}).")
    check_table(df, layout, _cost_columns(df, layout, models), question_col)
    questions = df[question_col].map(_prompt_text)
    ids = ([str(s) for s in df["sample_id"]] if layout == "routerbench" and "sample_id" in df.columns else
           [f"{dataset}-{i:05d}-{hashlib.sha256(q.encode()).hexdigest()[:16]}" for i, q in enumerate(questions)])
    out = pd.DataFrame({"sample_id": ids, "dataset": dataset, "task_type": "open", "question": questions.to_numpy(),
                        "reference": json.dumps([])})
    for alias, model in zip(aliases, models):
        strategy = f"{alias}_direct"
        out[f"answer__{strategy}"] = _responses(df, layout, model)
        out[f"correct__{strategy}"] = _correct(df, layout, model, min_score)
        if cost_ms:
            out[f"latency_ms__{strategy}"] = np.full(len(df), float(cost_ms[model]))
            out[f"output_tokens__{strategy}"] = 0
            continue
        out[f"latency_ms__{strategy}"] = _costs(df, layout, model, prices.get(model, prices[alias]))
        out[f"output_tokens__{strategy}"] = np.round(_costs(df, layout, model, 1.0) if layout == "routellm"
                                                     else np.zeros(len(df))).astype(int)
    names = [n for n in feature_names(("prompt",)) if "image" not in n]
    feats = pd.DataFrame([compute_features(q, (), {}, names) for q in questions], index=out.index)
    out = pd.concat([out, feats.astype(float)], axis=1)
    out["label"] = compute_labels(out, [f"{a}_direct" for a in aliases]).to_numpy()
    out.attrs["models"] = dict(zip(aliases, models))
    out.attrs["ladder"] = list(aliases)
    if cost_ms:
        out.attrs["cost_ms"] = {m: cost_ms[m] for m in models}
    return out


def no_cost_message(df: pd.DataFrame) -> str:
    """Why a RouteLLM-layout table without response (or cost) columns cannot be imported, and the fix."""
    flags = [c for c in df.columns if c not in ("prompt", "question") and _looks_boolean(df[c])]
    named = ", ".join(repr(c) for c in flags[:4]) or "the models' correctness columns"
    example = ",".join(f"{c}={v}" for c, v in zip(flags[:2], (1, 10))) or "MODEL_A=1,MODEL_B=10"
    return (f"The table has correctness columns ({named}) but no `<model>_response` (or `<model>_response_chars`) "
            f"column to price each answer by. Give each model's cost per call with --cost-ms, e.g. --cost-ms "
            f"'{example}' (the models are then ordered by it, cheapest first).")


def _looks_boolean(series: pd.Series) -> bool:
    text = series.dropna().astype(str).str.strip().str.lower()
    return len(text) > 0 and bool(text.isin(["true", "false", "1", "0", "1.0", "0.0"]).all())


def _check_costs(df: pd.DataFrame, layout: str, cost_ms: dict | None) -> dict | None:
    """`cost_ms` checked: finite costs > 0, each naming a correctness column of the table."""
    if not cost_ms:
        return None
    if layout == "routerbench":
        raise LabelsError("`--cost-ms` is for tables without cost columns (routellm, mmr-bench); the routerbench "
                          "layout carries `<model>|total_cost`.")
    out = {}
    for model, value in cost_ms.items():
        column = model if layout == "routellm" else f"{model}_correct"
        if column not in df.columns:
            raise LabelsError(f"`--cost-ms` names {model!r}, which has no correctness column {column!r} in the "
                              f"table (columns: {list(df.columns)[:8]}).")
        try:
            v = float(value)
        except (TypeError, ValueError):
            v = float("nan")
        if not (np.isfinite(v) and v > 0):
            raise LabelsError(f"`--cost-ms` gives {model!r} the cost {value!r}; a cost per call must be a finite "
                              "number of milliseconds > 0.")
        out[model] = v
    return out


def _ordered(df: pd.DataFrame, layout: str, models: list[str], order, small, cost_ms=None) -> list[str]:
    """The models to import, cheapest first."""
    if order:
        order = list(order)
        missing = [m for m in order if m not in models]
        if missing or len(set(order)) != len(order):
            raise LabelsError(f"`--order` must list distinct models of the table {models}, cheapest first. Got "
                              f"{order!r} instead.")
        return order
    if small is not None:
        if small not in models:
            raise LabelsError(f"`--small` must be one of the table's models {models}. Got {small!r} instead.")
        if len(models) != 2:
            raise LabelsError(f"`--small` names the cheaper of two models; the table has {len(models)}: {models}. "
                              "Give them all cheapest first with --order.")
        return [small, next(m for m in models if m != small)]
    if cost_ms:
        return sorted(models, key=lambda m: (cost_ms[m], models.index(m)))
    if layout == "routellm":
        known = [m for m in models if m.split("/")[-1] in KNOWN_LARGE]
        if len(models) == 2 and len(known) == 1:
            return [next(m for m in models if m not in known), known[0]]
        raise LabelsError(f"Cannot tell the cost order of {models} (the RouteLLM layout has no cost column); name the "
                          "models cheapest first with --order (or the cheaper of two with --small), or give each model's cost per call "
                          "with --cost-ms.")
    means = {m: float(np.nanmean(_costs(df, layout, m, 1.0))) if len(df) else 0.0 for m in models}
    return sorted(models, key=lambda m: (means[m], models.index(m)))


def outcome_metadata(labels: pd.DataFrame, layout: str, source: str) -> dict:
    """The `routedvlm` parquet metadata of imported labels (`ladder` and `models` keyed by alias)."""
    models = labels.attrs.get("models", {})
    ladder = labels.attrs.get("ladder", list(models))
    meta = {"models": {k: {"name": v, "revision": None, "dtype": "n/a", "device": "n/a"} for k, v in models.items()},
            "candidates": [f"{a}_direct" for a in ladder], "prompt_template": {"name": "none", "text": None,
                                                                               "instructions": None},
            "execution": f"imported outcome table ({layout})", "source_path": str(source),
            "costs": ("a fixed cost per call given with --cost-ms: " + json.dumps(labels.attrs["cost_ms"])
                      if labels.attrs.get("cost_ms") else "response tokens (chars / 4) x ms per token"
                      if layout == "routellm" else "the table's cost")}
    if len(ladder) > 2:
        meta["ladder"] = list(ladder)
    return meta


def with_meaning(labels: pd.DataFrame, encoder: str, dims: int, seed: int = 0) -> tuple[pd.DataFrame, dict]:
    """`labels` plus the meaning features (`feat__prompt__meaning_<i>`, inference/encoders) of their questions, from
    the sentence encoder at `encoder` (a folder or hub id), and the encoder's spec for the labels' metadata (identity,
    file hashes, projection, measured ms per prompt)."""
    from routedvlm.inference.encoders import load_meaning

    meaning = load_meaning(encoder, dims, seed)
    questions = labels["question"].astype(str).tolist()
    meaning.ms_per_prompt = round(meaning.encoder.ms_per_prompt(questions), 3)
    out = pd.concat([labels.drop(columns=[c for c in meaning.names if c in labels.columns]),
                     meaning.frame(questions, index=labels.index)], axis=1)
    out.attrs = dict(labels.attrs)
    return out, meaning.spec()
