"""`VLLMEngine`: a model side (`ModelSide`) served by an in-process vLLM engine (`vllm.LLM`), spec `vllm:<checkpoint>`.

Prompts are rendered here with the checkpoint's own tokenizer and chat template by the same `ChatFormat`
(`sides/chat.py`) the local side (`VLM`) inherits, and sent as text + image (`multi_modal_data`); vLLM expands the
image tokens. Decoding is greedy; answers and reasoning are read from the output token ids by that same object, so
an engine side answers what the local side answers. Requests go through one driver thread per engine
(`sides/vllm/driver.py`): calls from many threads (many samples in flight) share the engine's batches.

Measured by the engine itself:
- stage times from the request's engine timestamps (`RequestOutput.metrics`: scheduled -> first token = prefill,
  incl. the vision encoder; first -> last token = decode; queueing is left out), per-token times spread linearly;
- reuse from the engine's prefix cache (`RequestOutput.num_cached_tokens`: `cached_tokens`, `prefill_tokens` =
  prompt - cached). Two-stage decoding (escalation) is a second request sharing the `large_direct` prompt's prefix,
  and measured calls are isolated with vLLM's `cache_salt` exactly as on an HTTP side (`sides/http/remote_prompt.py`):
  a sample's namespace for `large_direct` and the two-stage calls, a fresh one (a cold call) for everything else.
The attention selector is unavailable (no attention weights). The engine is built on the first call, so
`capture_hidden(layers)` can still configure it (`sides/vllm/hidden.py`, the self-probe).
Engine arguments: `ENGINE_DEFAULTS`, on a CPU also `CPU_DEFAULTS`, then $ROUTEDVLM_VLLM_ENGINE_ARGS (a JSON object),
then `engine_args=`.
"""
from __future__ import annotations

import gc
import json
import logging
import os
import pathlib
import threading
import time
import uuid

from routedvlm.errors import ConfigError, ModeUnavailableError, ModelLoadError
from routedvlm.inference import sampling  # absolute: robust to the sides moving into folders

from ...prompts import DEFAULT_PROMPTS, PromptConfig
from ..base import THINK_CLOSE, ModelSide, continue_partial
from ..chat import ChatFormat
from ..http.side import measurement_salt
from ..results import Generation, ReasoningRun, record
from .engine_io import ENGINE_ARGS_ENV, freeze_heap, generation, image_uuid, resolve_engine_args

log = logging.getLogger(__name__)
SPEC_PREFIX = "vllm:"


def is_engine_spec(spec) -> bool:
    return isinstance(spec, str) and spec.startswith(SPEC_PREFIX)


class VLLMEngine(ChatFormat, ModelSide):
    """One side served by `vllm.LLM(model=path, **resolve_engine_args(engine_args))` in this process, built on first
    use (once, whichever thread calls first).
    Not stateful: calls from several threads are batched by the engine. See the module docstring."""

    kind = "vllm"
    stateful = False
    measure_cold = True
    require_prefix_cache = True

    def __init__(self, path, *, reasoner: "VLLMEngine | None" = None, thinking: str = "auto",
                 prompts: PromptConfig | None = None, reason_prompt: bool = True, top_logprobs: int = 5,
                 engine_args: dict | None = None):
        from transformers import AutoConfig, GenerationConfig

        from ..local.processors import load_processor

        self.name, self.path = str(path), pathlib.Path(path)
        if not self.path.is_dir():
            raise ModelLoadError(f"The vLLM engine side needs a local checkpoint folder ('vllm:<folder>'). "
                                 f"{self.name!r} is not a folder.")
        try:
            self.config = AutoConfig.from_pretrained(self.name)
            self.processor, self.tokenizer = load_processor(self.name, self.config.model_type)
        except (OSError, ValueError, KeyError) as exc:
            raise ModelLoadError(f"Cannot read the checkpoint {self.name!r} for a vLLM engine: {exc}") from exc
        try:
            self.generation_config = GenerationConfig.from_pretrained(self.name)
        except OSError:
            self.generation_config = None
        self.prompts, self.reasoner, self.reason_prompt, self.top_logprobs = (prompts or DEFAULT_PROMPTS, reasoner,
                                                                               reason_prompt, int(top_logprobs))
        self.style = self._detect_style() if thinking == "auto" else thinking
        self.think_close_id = self._single_id(THINK_CLOSE)
        self.engine_args = resolve_engine_args(engine_args)
        self._driver, self._hidden, self._extractable, self._params = None, None, None, {}
        self._starting = threading.Lock()
        self.request_log = None  # a list: every call's (stage, prompt dict, SamplingParams, output) is appended

    @classmethod
    def from_spec(cls, spec: str, *, reasoner=None, **kwargs) -> "VLLMEngine":
        """The side of 'vllm:<checkpoint folder>'; `reasoner` another such spec (or folder) or a VLLMEngine."""
        path = spec[len(SPEC_PREFIX):] if is_engine_spec(spec) else spec
        if isinstance(reasoner, (str, os.PathLike)):
            reasoner = cls.from_spec(str(reasoner), thinking="auto", prompts=kwargs.get("prompts"),
                                     engine_args=kwargs.get("engine_args"))
        return cls(path, reasoner=reasoner, **kwargs)

    # ----- the engine (built lazily) --------------------------------------------------------------------------
    @property
    def driver(self):
        if self._driver is None:
            with self._starting:  # many samples' threads make the first calls at once: one engine
                if self._driver is None:
                    self._driver = self._start()
        return self._driver

    def _start(self):
        from .driver import EngineDriver

        try:
            import vllm
        except ImportError as exc:
            raise ModeUnavailableError(f"The side {SPEC_PREFIX}{self.name} needs vLLM in this environment "
                                       f"(`make vllm-env`, then run with .venv-vllm/bin/python): {exc}") from None
        kwargs = dict(self.engine_args)
        if self._hidden is not None:
            kwargs.update(_hidden_module().engine_kwargs(*self._hidden))
        log.info("starting vLLM engine for %s with %s", self.name, kwargs)
        llm = vllm.LLM(model=self.name, **kwargs)
        freeze_heap()
        return EngineDriver(llm, name=self.name)

    def start(self) -> None:
        """Build the engine now (once, whichever thread calls first), not inside the first call."""
        self.driver  # noqa: B018 - the property builds the engine

    def close(self) -> None:
        """Stop the driver thread and release the engine (a later call starts a new one)."""
        if self._driver is not None:
            driver, self._driver = self._driver, None
            driver.close()
            core = getattr(driver.llm.llm_engine, "engine_core", None)
            if core is not None:
                core.shutdown()  # the engine's own processes end now, not at interpreter exit
            del driver.llm
            gc.unfreeze()  # what `freeze_heap` kept out of collection may be garbage now

    def block_size(self) -> int:
        """Tokens per KV block of the engine (its prefix cache reuses whole blocks)."""
        given = self.engine_args.get("block_size")
        return int(given) if given else int(self.driver.llm.llm_engine.vllm_config.cache_config.block_size)

    @property
    def returns_hidden_states(self) -> bool:
        """True when vLLM can extract this checkpoint's hidden states (its architecture implements vLLM's EAGLE3
        interface: Qwen3-VL, Qwen2.5-VL; not Qwen2-VL) and vLLM is installed."""
        if self._extractable is None:
            try:
                self._extractable = _hidden_module().supports_extraction(getattr(self.config, "architectures", None))
            except ImportError:
                self._extractable = False
        return self._extractable

    def capture_hidden(self, layers) -> None:
        """Capture decoder `layers` (transformers indices; negative counts from the end) in every call, by vLLM's
        hidden-state extraction during the call itself (`sides/vllm/hidden.py`); must come before the engine's first
        call."""
        if not self.returns_hidden_states:  # also when vllm_hidden (or vLLM) cannot be imported
            raise ModeUnavailableError(
                f"{SPEC_PREFIX}{self.name} cannot capture hidden states: vLLM extracts them only from models with its "
                f"EAGLE3 interface (Qwen3-VL, Qwen2.5-VL), and this checkpoint is "
                f"{getattr(self.config, 'architectures', None)} (or vLLM is not installed). Use such a checkpoint, or "
                "load the large model with transformers (a folder without 'vllm:').")
        text = self.config.get_text_config() if hasattr(self.config, "get_text_config") else self.config
        layers = _hidden_module().normalize_layers(list(layers), int(text.num_hidden_layers))
        if self._driver is not None:
            if self._hidden is not None and set(layers) <= set(self._hidden[0]):
                return  # already captured (a probe reads its layers out of `Generation.hidden`)
            raise ConfigError(f"capture_hidden({layers}) must be called before the first call of {SPEC_PREFIX}"
                              f"{self.name}: its engine is already running"
                              f"{'' if self._hidden is None else f' capturing {self._hidden[0]}'}. Load the side "
                              "again and capture first.")
        import tempfile

        self._hidden, self._params = (layers, tempfile.mkdtemp(prefix="routedvlm-vllm-hidden-")), {}

    # ----- identity -------------------------------------------------------------------------------------------
    @property
    def device(self) -> str:
        return f"vllm:{self.name}"

    def describe(self) -> dict:
        import importlib.metadata as md

        try:
            version = md.version("vllm")
        except md.PackageNotFoundError:
            version = None
        return {"name": self.name, "dtype": str(self.engine_args.get("dtype", "auto")), "device": "vllm-engine",
                "weights": self.name, "checkpoint": self.name, "engine": "vllm", "vllm": version,
                "engine_args": {k: v for k, v in self.engine_args.items() if _jsonable(v)}}

    def context_length(self) -> int | None:
        text = self.config.get_text_config() if hasattr(self.config, "get_text_config") else self.config
        limit = getattr(text, "max_position_embeddings", None)
        given = self.engine_args.get("max_model_len")
        return min(x for x in (limit, given) if x) if (limit or given) else None

    def eos_ids(self) -> list:
        eos = getattr(self.generation_config, "eos_token_id", None)
        eos = [eos] if isinstance(eos, int) else list(eos or [])
        return eos + ([self.tokenizer.eos_token_id] if self.tokenizer.eos_token_id is not None else [])

    def start_sample(self, request) -> None:
        """Name this sample's prefix-cache namespace (`cache_salt`) for a measured run."""
        request.__dict__.setdefault("_measure", f"routedvlm-{uuid.uuid4().hex[:16]}")

    # ----- one request ----------------------------------------------------------------------------------------
    def prompt_for(self, request, text: str, salt: str | None) -> dict:
        """The vLLM prompt dict of a rendered prompt `text` about the request's image."""
        prompt = {"prompt": text}
        if request.image is not None:
            prompt["multi_modal_data"] = {"image": request.image}
            prompt["multi_modal_uuids"] = {"image": [image_uuid(request)]}
        if salt is not None:
            prompt["cache_salt"] = salt
        return prompt

    def params(self, max_tokens: int, min_tokens: int = 0):
        """The SamplingParams of a greedy call (one object per token limits: vLLM copies a request's params)."""
        key = (int(max_tokens), min(int(min_tokens), int(max_tokens)))
        sample = sampling.current()  # a visible answer of a request that samples (not cached: seeds differ)
        if sample is not None:
            from vllm import SamplingParams

            extra = _hidden_module().request_params() if self._hidden is not None else None
            return SamplingParams(max_tokens=key[0], min_tokens=key[1], logprobs=self.top_logprobs or None,
                                  detokenize=False, skip_special_tokens=False, extra_args=extra,
                                  **sampling.engine_fields(sample))
        params = self._params.get(key)
        if params is None:
            from vllm import SamplingParams

            # with hidden states on, keep the answer tokens' states too, not only the prompt's
            extra = _hidden_module().request_params() if self._hidden is not None else None
            params = self._params[key] = SamplingParams(
                temperature=0.0, max_tokens=key[0], min_tokens=key[1], logprobs=self.top_logprobs or None,
                detokenize=False, skip_special_tokens=False, extra_args=extra)
        return params

    def call(self, request, text: str, *, max_tokens: int, min_tokens: int = 0, stage: str = "",
             salt: str | None = None) -> Generation:
        """One request: the rendered prompt `text` (+ the request's image) decoded greedily. salt: the `cache_salt`
        (default: the request's measurement salt for `stage`, see sides/http/side.py: measurement_salt)."""
        salt = salt if salt is not None else measurement_salt(request, stage)
        t0 = time.perf_counter()
        prompt, params = self.prompt_for(request, text, salt), self.params(max_tokens, min_tokens)
        from routedvlm.inference.streaming import current_streamer

        streamer = current_streamer()  # a streamed request's answer call: its tokens go out as the engine decodes them
        fut = self.driver.submit(prompt, params) if streamer is None else self.driver.submit(prompt, params, streamer.feed)
        out = fut.result()
        if self.request_log is not None:
            self.request_log.append((stage, prompt, params, out))
        return self.generation(out, (time.perf_counter() - t0) * 1000)

    def generation(self, out, wall_ms: float) -> Generation:
        """A Generation from one RequestOutput (`sides/vllm/engine_io.py`), with the hidden states when captured."""
        gen = generation(out, wall_ms)
        gen.prompt_ids = list(out.prompt_token_ids or [])  # what an escalation reuses (sides/vllm/engine_prompt.py)
        if self._hidden is not None:
            gen.hidden = _hidden_module().read_hidden(out, self._hidden[0])
        return gen

    def _record(self, stage, side, mode, gen, **extra) -> dict:
        if not gen.cached_tokens:
            extra["n_images"] = 1
        return record(stage, side, self, mode, gen, engine=True, **extra)

    # ----- ModelSide stages -----------------------------------------------------------------------------------
    def run_direct(self, side: str, request, cfg, *, cache=None, upcoming=(), inputs=None):
        gen = self.call(request, self.render(request.messages(), "direct"), max_tokens=cfg.max_direct_tokens,
                        min_tokens=cfg.min_new_tokens, stage=f"{side}_direct")
        rec = self._record(f"{side}_direct", side, self.mode_name("direct"), gen)
        return gen, self.clean_answer(gen.token_ids), [rec]

    def run_reasoning(self, side: str, request, cfg, max_tokens: int, *, cache=None, upcoming=(),
                      inputs=None) -> ReasoningRun:
        vlm = self.reasoning_side()
        text = vlm.render(request.messages(vlm.question_for(request.question, "reason")), "reason")
        gen = vlm.call(request, text, max_tokens=max_tokens, min_tokens=min(cfg.min_reason_tokens, max_tokens),
                       stage=f"{side}_reason")
        rids, rtext, answer = vlm.split_reasoning(gen.token_ids)
        rec = vlm._record(f"{side}_reason", side, vlm.mode_name("reason"), gen, reasoning_tokens=len(rids))
        run = ReasoningRun(vlm, side, gen, None, rids, rtext, answer, [rec])
        run._request, run._prompt_text = request, text
        return run

    def finish_answer(self, run: ReasoningRun, cfg) -> ReasoningRun:
        """Close a reasoning run that stopped inside its reasoning: its prompt + its tokens + the closing text, a
        direct answer continued from there (as the local side continues its KV cache)."""
        gen = run.gen
        body = gen.token_ids if gen.token_ids and gen.token_ids[-1] not in self.eos_ids() else gen.token_ids[:-1]
        text = run._prompt_text + self.tokenizer.decode(body, skip_special_tokens=False) + self.close_text()
        ans = self.call(run._request, text, max_tokens=cfg.max_direct_tokens, min_tokens=cfg.min_new_tokens,
                        stage=f"{run.side}_reason_answer")
        run.answer, run.answer_gen = self.clean_answer(ans.token_ids), ans
        run.records.append(self._record(f"{run.side}_reason_answer", run.side, self.mode_name("reason"), ans))
        return run

    def answer_cold(self, alias: str, request, question: str, stage: str, cfg, *, salt: str | None = None,
                      max_tokens: int | None = None):
        """A direct answer to `question` about the request's image as model `alias`: (gen, answer, record)."""
        limit = cfg.max_direct_tokens if max_tokens is None else max_tokens
        gen = self.call(request, self.render(request.messages(question), "direct"), max_tokens=limit,
                        min_tokens=min(cfg.min_new_tokens, limit), stage=stage, salt=salt)
        return gen, self.clean_answer(gen.token_ids), self._record(stage, alias, self.mode_name("direct"), gen)

    def prefix(self, alias: str, request, cfg):
        from .engine_prompt import EnginePrompt

        return EnginePrompt(self, request, cfg, alias)

    def complete(self, request, mode: str, *, max_tokens: int, min_tokens: int = 0, partial: str | None = None,
                 check_context=None):
        """(Generation, answer or None while reasoning, reasoning or None) of one call (as `VLM.complete`)."""
        text = continue_partial(self.render(request.messages(), mode), partial)
        gen = self.call(request, text, max_tokens=max_tokens, min_tokens=min_tokens, salt=None, stage="complete")
        if mode != "reason" or partial is not None:
            return gen, self.clean_answer(gen.token_ids), None
        _, reasoning, answer = self.split_reasoning(gen.token_ids)
        return gen, answer, reasoning


def load(path, *, reasoner=None, prompts=None, engine_args=None, **_local) -> VLLMEngine:
    """The spec table's loader ('vllm:<folder>' without its prefix): `device`/`dtype` given for local models are the
    engine's own settings here ($ROUTEDVLM_VLLM_ENGINE_ARGS, `engine_args`), so they are ignored."""
    return VLLMEngine.from_spec(str(path), reasoner=reasoner, prompts=prompts, engine_args=engine_args)


def _hidden_module():
    """routedvlm.inference.sides.vllm.hidden (vLLM's hidden-state extraction: `engine_kwargs`, `read_hidden`),
    imported only when hidden states are asked for."""
    import importlib

    return importlib.import_module("routedvlm.inference.sides.vllm.hidden")


def _jsonable(value) -> bool:
    try:
        json.dumps(value)
        return True
    except TypeError:
        return False


__all__ = ["ENGINE_ARGS_ENV", "SPEC_PREFIX", "VLLMEngine", "is_engine_spec", "resolve_engine_args"]
