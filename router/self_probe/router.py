"""The self-probe router: P(correct) per strategy from the large model's own hidden state of the `large_direct`
pass a cascade already paid for, plus the policy's tabular features, through a small linear head.

Artifact: `policy.json` (`router_type: "self-probe"`; `params.hidden`: layers, position and size of the vector;
`params.large_model` / `large_hash`: the checkpoint whose hidden states it reads) + `head.safetensors` (weights,
bias, input scaling). Deciding needs numpy and safetensors only (no torch); the vector comes with the request as
`decide({..., HIDDEN_KEY: vector})`, which RoutedVLM fills from its own `large_direct` generation (it switches on
the capture of `hidden_layers` on the large side: transformers hooks, or vLLM's hidden-state extraction on an
in-process engine). Models behind an HTTP server return no hidden states.
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from routedvlm.errors import RouterError, RouterLoadError
from ..base import Router
from ..checkpoints import weights_hash
from ..decision_rules import uses_model
from ..policy import Policy
from ..strategies import LARGE_DIRECT

log = logging.getLogger(__name__)
HIDDEN_KEY = "_large_direct_hidden"  # decide() input: the large model's hidden-state vector (numpy, float32)
HEAD_FILE = "head.safetensors"
LARGE_ENV = "ROUTEDVLM_SELF_PROBE_LARGE"  # overrides params.large_model when checking the weights


class SelfProbeRouter(Router):
    """`head`: {"weight": [d_in, S], "bias": [S], "mean": [d_in], "std": [d_in]}; inputs are the hidden vector
    (params.hidden.size values) followed by `policy.features`, standardised, then sigmoid(x @ weight + bias)."""

    def __init__(self, policy: Policy, head: dict):
        hidden = dict(policy.params.get("hidden") or {})
        if policy.mode != "cascade" and uses_model(policy.decision_rule):
            raise RouterError(f"A self-probe router whose rule reads it ({policy.decision_rule['name']}) needs the "
                              f"large_direct pass, so its mode must be 'cascade'. Got {policy.mode!r}.")
        size = hidden.get("size")
        if not isinstance(size, int) or size <= 0 or not hidden.get("layers") or not hidden.get("position"):
            raise RouterError(f"policy.json params.hidden must give layers, position and a positive size. Got {hidden}.")
        d_in, n_s = size + len(policy.features), len(policy.strategies)
        shapes = {"weight": (d_in, n_s), "bias": (n_s,), "mean": (d_in,), "std": (d_in,)}
        wrong = {k: (None if k not in head else tuple(head[k].shape)) for k, s in shapes.items()
                 if k not in head or tuple(head[k].shape) != s}
        if wrong:
            raise RouterError(f"The self-probe head does not fit its policy ({size} hidden values + "
                              f"{len(policy.features)} features -> {n_s} strategies): expected {shapes}, got {wrong}.")
        self.head = {k: np.asarray(head[k], dtype=np.float64) for k in shapes}
        self.hidden = hidden
        self.last_input = None
        self._checked = {}
        super().__init__(policy)

    # ---- scoring ----
    def check_features(self, columns, names=None) -> None:
        super().check_features(columns, names)
        if names is None and not uses_model(self.policy.decision_rule):
            return  # the rule reads no P(correct): the head does not run
        if HIDDEN_KEY not in columns:
            raise RouterError(f"The self-probe router needs the large model's hidden state under {HIDDEN_KEY!r} (a "
                              f"vector of {self.hidden['size']} values from the large_direct pass); RoutedVLM "
                              "supplies it from a local large model.")

    def _inputs(self, df):
        return df[[*self.policy.features, HIDDEN_KEY]]

    def _matrix(self, hidden_rows, feature_rows) -> np.ndarray:
        size = self.hidden["size"]
        try:
            h = np.stack([np.asarray(v, dtype=np.float64).reshape(-1) for v in hidden_rows]) if len(hidden_rows) else \
                np.zeros((0, size))
            f = np.asarray(feature_rows, dtype=np.float64).reshape(len(h), len(self.policy.features))
        except (TypeError, ValueError) as exc:
            raise RouterError(f"The self-probe's inputs must be numeric: {exc}") from None
        if h.shape[1] != size:
            raise RouterError(f"The hidden-state vector has {h.shape[1]} values; this self-probe reads {size} "
                              f"(layers {self.hidden['layers']}, position {self.hidden['position']!r}).")
        x = np.concatenate([h, np.nan_to_num(f, nan=0.0)], axis=1)
        return (x - self.head["mean"]) / self.head["std"]

    def _p(self, x: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-(x @ self.head["weight"] + self.head["bias"])))

    def predict_proba(self, features):
        import pandas as pd

        self.check_features(features.columns, self.policy.features)
        x = self._matrix(list(features[HIDDEN_KEY]), features[self.policy.features].to_numpy(dtype=np.float64))
        return pd.DataFrame(self._p(x), index=features.index, columns=self.policy.strategies)

    def _proba_row(self, row: dict) -> dict[str, float]:
        feats = [[float("nan") if row[f] is None else row[f] for f in self.policy.features]]
        self.last_input = np.asarray(row[HIDDEN_KEY], dtype=np.float32)
        p = self._p(self._matrix([row[HIDDEN_KEY]], feats))[0]
        return dict(zip(self.policy.strategies, map(float, p)))

    @property
    def required_stages(self) -> set[str]:
        """The policy's stages plus `large_direct`, whose hidden state the head reads (on a ladder the climb pays it
        last, the most expensive model's direct pass); nothing extra when the rule reads no P(correct)."""
        stages = super().required_stages
        return stages | {LARGE_DIRECT} if uses_model(self.policy.decision_rule) else stages

    # ---- RoutedVLM hooks (declared on Router) ----
    @property
    def hidden_layers(self) -> list[int]:
        """Decoder layers of the large model whose outputs RoutedVLM must capture during large_direct."""
        return list(self.hidden["layers"])

    def attach(self, pipeline) -> None:
        """Check that the pipeline's large model can give this probe its input (RoutedVLM calls it on load)."""
        large = pipeline.large
        if not large.returns_hidden_states:
            raise RouterError(
                "The self-probe router reads the large model's hidden states, and the large side "
                f"({getattr(large, 'name', large)}) returns none: an OpenAI-compatible server (vLLM, SGLang) does not, "
                "nor does an in-process vLLM engine ('vllm:<folder>') whose architecture lacks vLLM's hidden-state "
                "extraction (e.g. Qwen2-VL). Use a LightGBM or lora-probe router, or load the large model locally "
                "(a folder) or on a vLLM engine of a supported architecture (Qwen3-VL, Qwen2.5-VL).")
        self._check_weights(large)

    def _check_weights(self, large) -> None:
        name = str(getattr(large, "name", ""))
        if name in self._checked:
            return
        expected = self.policy.params.get("large_hash")
        found = weights_hash(name) if Path(name).is_dir() else None
        if expected and found and found != expected:
            raise RouterError(f"The large model {name!r} has weights {found}, but this self-probe was trained on the "
                              f"hidden states of {expected}. Its head only reads that model: retrain it with "
                              "train-router --router self-probe on labels of this large model.")
        if expected and not found:
            log.warning("cannot verify the large model %s against the self-probe's %s (not a local folder)", name, expected)
        self._checked[name] = True

    def runtime_inputs(self, request, stages: dict, pipeline) -> dict:
        """The hidden-state vector of the large_direct generation that just ran (no second forward pass); nothing
        when the rule reads no P(correct) (a fixed fallback may not run large_direct at all)."""
        if not uses_model(self.policy.decision_rule):
            return {}
        result = stages.get(LARGE_DIRECT)
        gen = None if result is None else result.generation
        hidden = None if gen is None else getattr(gen, "hidden", None)
        if hidden is None:
            raise RouterError("The large_direct pass carries no hidden states: capture must be on for the large model "
                              "(RoutedVLM switches it on for a router with `hidden_layers`) before the pass runs.")
        return {HIDDEN_KEY: hidden.vector(self.hidden["position"], self.hidden["layers"])}

    # ---- persistence ----
    def _save_files(self, directory: Path) -> None:
        from safetensors.numpy import save_file

        save_file({k: v.astype(np.float64) for k, v in self.head.items()}, str(directory / HEAD_FILE))
        self.policy.params["head"] = HEAD_FILE

    @classmethod
    def model_files(cls, policy: Policy) -> list[str]:
        head = policy.params.get("head")
        if not isinstance(head, str) or not head:
            raise RouterLoadError(f"policy.json params must name the self-probe's `head` file. Got {head!r:.100}. "
                                  "Retrain with train-router --router self-probe.")
        return [head]

    @classmethod
    def _from_folder(cls, policy: Policy, directory: Path) -> "SelfProbeRouter":
        from safetensors import SafetensorError
        from safetensors.numpy import load_file

        path = directory / cls.model_files(policy)[0]
        if not path.is_file():
            raise RouterLoadError(f"The self-probe folder {str(directory)!r} lacks {path.name} named in policy.json. Copy "
                                  "the whole router folder, or retrain with train-router --router self-probe.")
        try:
            head = load_file(str(path))
        except (SafetensorError, OSError, ValueError) as exc:
            raise RouterLoadError(f"{path} is not a readable safetensors head ({exc}).") from None
        bad = sorted(k for k, v in head.items() if not np.isfinite(v).all())
        if bad:
            raise RouterLoadError(f"{path} holds non-finite values in {bad}; retrain with train-router --router self-probe.")
        try:
            return cls(policy, head)
        except RouterError as exc:
            raise RouterLoadError(str(exc)) from None
