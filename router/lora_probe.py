"""The LoRA probe router: the small VLM reads the image and question itself and a small head predicts P(correct)
per candidate strategy from its last hidden state at the final prompt position (+ stage features in cascade mode).

The only module of `routedvlm.router` that imports torch, peft and (lazily, to load the small VLM and its processor)
`routedvlm.inference`; the LightGBM path never does. Artifact: `policy.json` (base checkpoint path + sha256 of its
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

import contextlib
import copy
import logging
import time
from pathlib import Path

import numpy as np

from routedvlm.errors import RouterError, RouterLoadError
from .base import Router
from .checkpoints import weights_hash
from .decision_rules import uses_model
from .policy import Policy
from .probe_files import adapter_files, load_probe, read_plain, save_probe
from .strategies import SMALL_DIRECT

log = logging.getLogger(__name__)
SHARED_ADAPTER = "routedvlm_probe"  # the adapter's name when injected into RoutedVLM's own small model
BASE_ENV = "ROUTEDVLM_PROBE_BASE"  # overrides the base checkpoint path recorded in policy.json
SHARED_KEY = "_small_direct_prefill"  # decide() input: the small model's direct-prompt state (see SharedPrefill)
ADAPTED = r"self_attn\.(q_proj|o_proj)|mlp\.(gate_proj|up_proj|down_proj)"
def target_regex(model) -> str:
    """peft `target_modules` regex: q/o projections and MLP of the language model's last decoder layer."""
    last = model.config.get_text_config().num_hidden_layers - 1
    return rf"^model\.(language_model|text_model)\.layers\.{last}\.({ADAPTED})$"


class SharedPrefill:
    """The small model's `small_direct` state RoutedVLM hands to the probe: its KV cache (prompt + answer),
    the prompt length and the Qwen-VL rope offset of that prefill. The cache is cropped in place."""

    def __init__(self, cache, prompt_tokens: int, rope_deltas=None):
        self.cache, self.prompt_tokens, self.rope_deltas = cache, int(prompt_tokens), rope_deltas


class ProbeNet:
    """The small VLM (+ LoRA on its last layer when `lora_r > 0`) and the head; `p_correct` is the forward."""

    def __init__(self, vlm, strategies, features, *, lora_r: int = 8, lora_alpha: int = 16, head_hidden: int = 64,
                 seed: int = 0):
        import torch

        self.vlm, self.strategies, self.features = vlm, list(strategies), list(features)
        self.lora_r, self.lora_alpha, self.head_hidden = int(lora_r), int(lora_alpha), int(head_hidden)
        torch.manual_seed(seed)
        for p in vlm.model.parameters():
            p.requires_grad_(False)
        self.peft = None
        if self.lora_r > 0:
            from peft import LoraConfig, get_peft_model

            conf = LoraConfig(r=self.lora_r, lora_alpha=self.lora_alpha, lora_dropout=0.0, bias="none",
                              target_modules=target_regex(vlm.model))
            self.peft = get_peft_model(vlm.model, conf)
        d = vlm.model.config.get_text_config().hidden_size
        n_f = len(self.features)
        self.head = torch.nn.Sequential(torch.nn.Linear(d + n_f, head_hidden), torch.nn.GELU(),
                                        torch.nn.Linear(head_hidden, len(self.strategies)))
        self.feat_mean, self.feat_std = torch.zeros(n_f), torch.ones(n_f)
        self._tuners, self._adapter = [], None  # set by `adopt`
        self.eval()

    def adopt(self, small_vlm) -> None:
        """Run on `small_vlm` (same base weights) instead of our own copy, which is released: our adapter is
        injected into its model, switched off except during the probe's own passes (its generations are unchanged)."""
        from peft.tuners.tuners_utils import BaseTunerLayer

        if self.lora_r > 0:
            from peft import inject_adapter_in_model

            conf, state = self.adapter_state()
            inject_adapter_in_model(copy.deepcopy(conf), small_vlm.model, adapter_name=SHARED_ADAPTER)
            named = {k.replace(".lora_A.", f".lora_A.{SHARED_ADAPTER}.").replace(".lora_B.", f".lora_B.{SHARED_ADAPTER}."): v
                     for k, v in state.items()}
            bad = small_vlm.model.load_state_dict(named, strict=False).unexpected_keys
            if bad:
                raise RouterError(f"Cannot share the small model's weights: adapter keys {bad[:3]} do not fit it.")
            self._adapter = (conf, state)
            self._tuners = [m for m in small_vlm.model.modules() if isinstance(m, BaseTunerLayer)]
            for m in self._tuners:
                m.enable_adapters(False)
        self.vlm, self.peft = small_vlm, None
        self.to(small_vlm.model.device)

    def adapter_state(self) -> tuple:
        """(LoraConfig, adapter weights keyed by module path from the top model) of this probe."""
        if self._adapter is not None:
            return self._adapter
        from peft.utils import get_peft_model_state_dict

        state = {k.removeprefix("base_model.model."): v for k, v in get_peft_model_state_dict(self.peft).items()}
        return self.peft.peft_config["default"], state

    @contextlib.contextmanager
    def adapter_on(self):
        """The adapter is active inside (a no-op unless the weights are shared with the small model)."""
        for m in self._tuners:
            m.enable_adapters(True)
        try:
            yield
        finally:
            for m in self._tuners:
                m.enable_adapters(False)

    def trainable(self) -> list:
        lora = [p for p in self.vlm.model.parameters() if p.requires_grad]
        return lora + list(self.head.parameters())

    def to(self, device, dtype=None) -> "ProbeNet":
        """Move the VLM (and cast it to `dtype`, e.g. the small model's) and the head (kept float32) to `device`."""
        self.vlm.model.to(device=device, dtype=dtype) if dtype is not None else self.vlm.model.to(device)
        self.head.to(device)
        self.feat_mean, self.feat_std = self.feat_mean.to(device), self.feat_std.to(device)
        return self

    def train(self):
        self.vlm.model.train()
        self.head.train()

    def eval(self):
        self.vlm.model.eval()
        self.head.eval()

    # ---- forward ----
    def prompt_text(self, question: str) -> str:
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
        return self.vlm.render(messages, "direct")

    def encode(self, image, question: str) -> dict:
        """Model inputs of the small model's direct prompt (the prompt `small_direct` prefills)."""
        from routedvlm.inference.inputs import load_image

        return self.vlm.encode(load_image(image), self.prompt_text(question))

    def hidden(self, inputs: dict):
        """Last-layer hidden state (after the final norm) at the final prompt position: (1, d) float."""
        with self.adapter_on():
            out = self.vlm.model.model(**inputs, use_cache=False)
        return out.last_hidden_state[:, -1].float()

    def shared_hidden(self, shared: SharedPrefill, question: str):
        """The same hidden state from the small model's own direct-prompt cache: re-feed the last prompt token."""
        import torch

        cache = shared.cache
        keep = shared.prompt_tokens - 1
        if cache.get_seq_length() > keep:
            cache.crop(-(cache.get_seq_length() - keep))
        owner = self.vlm.model.model
        if hasattr(owner, "rope_deltas"):
            owner.rope_deltas = None if shared.rope_deltas is None else shared.rope_deltas.clone()
        last = self.vlm.text_ids(self.prompt_text(question))[-1]
        ids = torch.tensor([[last]], device=self.vlm.device)
        with self.adapter_on():
            out = owner(input_ids=ids, cache=cache, use_cache=True)
        return out.last_hidden_state[:, -1].float()

    def feature_tensor(self, rows: list[dict]):
        import torch

        x = torch.tensor([[_num(r.get(f)) for f in self.features] for r in rows], dtype=torch.float32,
                         device=self.feat_mean.device)
        x = (x - self.feat_mean) / self.feat_std
        return torch.nan_to_num(x, nan=0.0).reshape(len(rows), len(self.features))

    def logits(self, hidden, feats):
        import torch

        return self.head(torch.cat([hidden, feats.to(hidden.device)], dim=1))

    def p_correct(self, row: dict, shared: SharedPrefill | None = None) -> tuple[np.ndarray, bool]:
        """(P(correct) per strategy, whether the prefill was shared) for one sample row."""
        import torch

        image, question = sample_inputs(row)
        with torch.inference_mode():
            h, used = None, False
            if shared is not None:
                try:
                    h, used = self.shared_hidden(shared, question), True
                except Exception as exc:  # a cache layout we cannot crop: fall back to our own prefill
                    log.warning("cannot share the small model's prefill (%s: %s); the probe prefills itself",
                                type(exc).__name__, exc)
            if h is None:
                h = self.hidden(self.encode(image, question))
            p = torch.sigmoid(self.logits(h, self.feature_tensor([row]).to(h.device)))[0]
        return p.cpu().numpy().astype(np.float64), used

    # ---- files (probe_files.py) ----
    def save(self, directory: Path) -> dict:
        return save_probe(self, directory)

    def load_weights(self, directory: Path) -> None:
        """Load the adapter (if any) and the head saved by `save` into this net (RouterLoadError if they do not fit)."""
        load_probe(self, read_plain(directory))


def sample_inputs(row: dict) -> tuple[object, str]:
    """(image, question) of a sample row: `image` (PIL or path) or the first of `images`, and `question`."""
    image = row.get("image")
    if image is None and row.get("images") is not None and len(row["images"]):
        image = row["images"][0]
    question = row.get("question")
    if image is None or not isinstance(question, str) or not question.strip():
        raise RouterError("The lora-probe router reads the sample itself: pass `image` (a PIL image or a path; or "
                          f"`images`) and a non-empty `question` with the features. Got image={type(image).__name__}, "
                          f"question={question!r}.")
    return image, question


def _num(v) -> float:
    return float("nan") if v is None else float(v)


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

    # ---- RoutedVLM hooks (duck-typed: the policy runner calls them when present) ----
    def runtime_inputs(self, request, stages: dict, pipeline) -> dict:
        """Extra decide() inputs at run time: the sample, and the small_direct prefill when it can be shared."""
        out = {"image": request.image, "question": request.question}
        small = stages.get(SMALL_DIRECT)
        same = self._same_base(pipeline.small)
        if same and self.net.vlm is not pipeline.small:
            self.net.adopt(pipeline.small)  # one copy of the small model's weights in memory
        model = self.net.vlm.model
        if (model.device, model.dtype) != (pipeline.small.model.device, pipeline.small.model.dtype):
            self.net.to(pipeline.small.model.device, pipeline.small.model.dtype)  # run where the small model runs
        if small is not None and small.generation is not None and same:
            gen, owner = small.generation, getattr(pipeline.small.model, "model", None)
            rope = getattr(owner, "rope_deltas", None)
            out[SHARED_KEY] = SharedPrefill(gen.cache, gen.prefill_tokens + gen.cached_tokens,
                                            None if rope is None else rope.clone())
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
        from .integrity import read_verified

        params = policy.params
        net = build_net(params.get("base_model"), policy, params.get("base_hash"), given=base)
        load_probe(net, lambda rel: read_verified(policy, directory, rel), head=params["head"], adapter=params.get("adapter"))
        return cls(policy, net)


def load_base(base, expected_hash: str | None = None, *, given=None):
    """The probe's base small VLM (a `routedvlm.inference.VLM`): `given` (or $ROUTEDVLM_PROBE_BASE), else the
    recorded folder `base`, else a shipped toy checkpoint with the same weights (`locate_checkpoint`); RouterError
    when none is found or the folder found has weights other than `expected_hash`."""
    from routedvlm.errors import ConfigError

    from .checkpoints import locate_checkpoint

    try:
        folder = locate_checkpoint(base, expected_hash, given=given, env=BASE_ENV, flag=f"${BASE_ENV}",
                                   what="The lora-probe router's base small VLM")
    except ConfigError as exc:
        raise RouterError(str(exc)) from None
    found = weights_hash(folder)
    if expected_hash and found != expected_hash:
        raise RouterError(f"The base checkpoint {str(folder)!r} has weights {found}, but the probe was trained on "
                          f"{expected_hash}. The LoRA adapter only works on identical base weights: point "
                          f"{BASE_ENV} at the original checkpoint.")
    from routedvlm.inference.vlm import VLM

    return VLM.from_pretrained(str(folder))


def build_net(base, policy: Policy, expected_hash: str | None = None, *, seed: int = 0, given=None) -> ProbeNet:
    """The policy's probe on its base checkpoint (adapter and head freshly initialised; see `load_weights`)."""
    p = policy.params
    lora = p.get("lora") or {}
    return ProbeNet(load_base(base, expected_hash, given=given), policy.strategies, policy.features,
                    lora_r=lora.get("r", 0) if p.get("adapter") else 0, lora_alpha=lora.get("alpha", 16),
                    head_hidden=p.get("head_hidden", 64), seed=seed)

