"""The LoRA probe router: the small VLM reads the image and question itself and a small head predicts P(correct)
per candidate strategy from its last hidden state at the final prompt position (+ stage features in cascade mode).

With `net.py` and `files.py`, the only modules of `routedvlm.router` that import torch, peft and (lazily, to load the
small VLM and its processor) `routedvlm.inference`; the LightGBM path never does. Artifact: `policy.json` (base checkpoint path + sha256 of its
weights), `adapter/` (peft LoRA adapter), `head.safetensors` (head weights and feature scaling). No pickle.

Why the adapter sits on the last decoder layer only, and not on its k/v projections: every layer below keeps the
base weights, and the last layer's keys/values are the base model's too. So the probe's hidden state equals what
one re-fed prompt token gives on top of the small model's own (adapter-free) direct-prompt KV cache: when RoutedVLM
has run `small_direct`, the probe shares its prefill (vision + prompt) and costs one token (`probe_shared_prefill`).
Otherwise the probe prefills the prompt itself. A full-depth adapter would see more but could never share.
At run time the probe also adopts RoutedVLM's small model when it is the same base (`ProbeNet.adopt`): the adapter
is injected there, off except during the probe's passes, and the probe's own copy of the weights is released.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np

from routedvlm.errors import RouterError, RouterLoadError
from ..base import Router
from ..checkpoints import weights_hash
from ..decision_rules import uses_model
from ..policy import Policy
from ..strategies import SMALL_DIRECT
from .files import adapter_files, load_probe
from .net import ProbeNet, SharedPrefill

log = logging.getLogger(__name__)
BASE_ENV = "ROUTEDVLM_PROBE_BASE"  # overrides the base checkpoint path recorded in policy.json
SHARED_KEY = "_small_direct_prefill"  # decide() input: the small model's direct-prompt state (see SharedPrefill)


class LoRAProbeRouter(Router):
    """P(correct) per strategy from the small VLM's view of the sample (see the module docstring)."""

    INPUTS = ("image", "images", "question")

    def __init__(self, policy: Policy, net: ProbeNet):
        if list(net.strategies) != list(policy.strategies) or list(net.features) != list(policy.features):
            raise RouterError(f"The probe head predicts {net.strategies} from features {net.features}, but the policy "
                              f"has strategies {policy.strategies} and features {policy.features}. Retrain the probe.")
        self.net = net
        self.last_trace: dict = {}
        self._shareable: dict[str, bool] = {}
        super().__init__(policy)

    def check_features(self, columns, names=None) -> None:
        super().check_features(columns, names)
        if names is None and not uses_model(self.policy.decision_rule):
            return  # the rule reads no P(correct): the probe does not run
        cols = set(columns)
        missing = [k for k in ("image", "question") if k not in cols and not (k == "image" and "images" in cols)]
        if missing:
            raise RouterError(f"The lora-probe router needs the sample's {missing} (beside the features): it reads "
                              "the image and question through the small VLM. Add an `image` (or `images`) and a "
                              "`question` column/key.")

    def _inputs(self, df):
        return df[[*self.policy.features, *[c for c in self.INPUTS if c in df.columns]]]

    def predict_proba(self, features):
        import pandas as pd

        self.check_features(features.columns, self.policy.features)
        rows = features.to_dict(orient="records")
        values = np.stack([self.net.p_correct(r)[0] for r in rows]) if rows else np.zeros((0, len(self.net.strategies)))
        return pd.DataFrame(values, index=features.index, columns=self.policy.strategies)

    def _proba_row(self, row: dict) -> dict[str, float]:
        t0 = time.perf_counter()
        p, shared = self.net.p_correct(row, row.get(SHARED_KEY))
        self.last_trace = {"probe_shared_prefill": shared, "probe_ms": round((time.perf_counter() - t0) * 1000, 4)}
        return dict(zip(self.policy.strategies, map(float, p)))

    # ---- RoutedVLM hooks (declared on Router) ----
    def runtime_inputs(self, request, stages: dict, pipeline) -> dict:
        """Extra decide() inputs at run time: the sample, and the small_direct prefill when it can be shared."""
        out = {"image": request.image, "question": request.question}
        small = stages.get(SMALL_DIRECT)
        same = self._same_base(pipeline.small)
        if same and self.net.vlm is not pipeline.small:
            self.net.adopt(pipeline.small)  # one copy of the small model's weights in memory
        where = pipeline.small.placement  # None: a served small model, no local weights to run beside
        if where is not None and self.net.vlm.placement != where:
            self.net.to(*where)  # the probe runs where the small model runs
        if small is not None and small.generation is not None and same:
            gen = small.generation
            out[SHARED_KEY] = SharedPrefill(gen.cache, gen.prefill_tokens + gen.cached_tokens,
                                            pipeline.small.rope_state())
        return out

    def trace_info(self) -> dict:
        return dict(self.last_trace)

    def _same_base(self, small_vlm) -> bool:
        name = str(small_vlm.name)
        if name not in self._shareable:
            self._shareable[name] = Path(name).is_dir() and weights_hash(name) == self.policy.params.get("base_hash")
            if not self._shareable[name]:
                log.info("the small VLM %s is not the probe's base: the probe prefills its own prompt", name)
        return self._shareable[name]

    # ---- persistence ----
    def _save_files(self, directory: Path) -> None:
        self.policy.params.update(self.net.save(directory))

    @classmethod
    def model_files(cls, policy: Policy) -> list[str]:
        head, adapter = policy.params.get("head"), policy.params.get("adapter")
        if not isinstance(head, str) or not head or not isinstance(adapter, (str, type(None))):
            raise RouterLoadError(f"policy.json params must name the probe's `head` file (and its `adapter` folder or "
                                  f"null). Got head={head!r:.100}, adapter={adapter!r:.100}. Retrain with train-router "
                                  "--router lora-probe.")
        return [head, *(adapter_files(adapter) if adapter else [])]

    @classmethod
    def _from_folder(cls, policy: Policy, directory: Path, base=None) -> "LoRAProbeRouter":
        from ..integrity import read_verified

        params = policy.params
        net = build_net(params.get("base_model"), policy, params.get("base_hash"), given=base)
        load_probe(net, lambda rel: read_verified(policy, directory, rel), head=params["head"], adapter=params.get("adapter"))
        return cls(policy, net)


def load_base(base, expected_hash: str | None = None, *, given=None):
    """The probe's base small VLM (a `routedvlm.inference.VLM`): `given` (or $ROUTEDVLM_PROBE_BASE), else the
    recorded folder `base`, else a shipped toy checkpoint with the same weights (`locate_checkpoint`); RouterError
    when none is found or the folder found has weights other than `expected_hash`."""
    from routedvlm.errors import ConfigError

    from ..checkpoints import locate_checkpoint

    try:
        folder = locate_checkpoint(base, expected_hash, given=given, env=BASE_ENV, flag=f"${BASE_ENV}",
                                   what="The lora-probe router's base small VLM", mismatch="raise")
    except ConfigError as exc:  # the LoRA adapter only works on identical base weights
        raise RouterError(str(exc)) from None
    from routedvlm.inference.vlm import VLM

    return VLM.from_pretrained(str(folder))


def build_net(base, policy: Policy, expected_hash: str | None = None, *, seed: int = 0, given=None) -> ProbeNet:
    """The policy's probe on its base checkpoint (adapter and head freshly initialised; see `load_weights`)."""
    p = policy.params
    lora = p.get("lora") or {}
    return ProbeNet(load_base(base, expected_hash, given=given), policy.strategies, policy.features,
                    lora_r=lora.get("r", 0) if p.get("adapter") else 0, lora_alpha=lora.get("alpha", 16),
                    head_hidden=p.get("head_hidden", 64), seed=seed)

