"""`LabelConfig`: every setting of a labelling run (`routedvlm label` flags are its fields), validated once.

The models may be named as a pair (`--small/--large`, `--small-reasoner`, `--cost-model-small`, ...) or as a ladder
(`--model`/`--models`, `--reasoner ALIAS=SPEC`, `--cost-model ALIAS=NAME`); either way the run reads them from one
`Ladder` (`cfg.ladder`, ladder.py), the pair being a ladder of two. The flags stay as given in the recorded settings.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from routedvlm.errors import ConfigError, one_of
from routedvlm.router.strategies import (DEFAULT_K_GRID, MAX_LADDER, default_strategies, ladder_aliases,
                                         ladder_strategies, parse_k_grid, parse_strategy)

SELECTOR_NAMES = ("attention", "prefix", "suffix")
DEVICE_HELP = "'auto' (cuda when available, else cpu), 'cpu', 'cuda', 'cuda:1', ..."
# fields that do not change what the run computes: they may differ between a run and its --resume (the latency
# source they imply may not: see labelling.check_latency_source)
NOT_SETTINGS = ("resume", "flush_every", "progress", "concurrency", "ray", "ray_address", "num_workers",
                "gpus_per_worker", "estimate_only")
# ladder settings: recorded (and compared on --resume) only when given, so a pair's settings stay what they were
LADDER_SETTINGS = ("models", "reasoners", "transfer_pairs", "reason_models", "cost_models")
REMOTE_CONCURRENCY = 32  # default samples in flight when every side is a server or an in-process engine


def every_side(cfg, capability: str) -> bool:
    """Whether every model of the run has `capability`, as the spec table declares it for its kind
    (`inference/sides/kinds.py`): "batching" (servers, in-process engines: samples may share their batches),
    "remote" (nothing of the pipeline runs in this process), "stateful", ..."""
    from routedvlm.inference.sides.kinds import every_side as every

    return every(cfg.ladder_specs().values(), capability)


def requests_in_flight(cfg, remote: bool) -> int | None:
    """Samples in flight on one model at once: 1 for local models (one per replica), else concurrency x Ray
    workers (None: Ray workers not counted yet, i.e. as many as the cluster gives)."""
    if not remote:
        return 1
    if cfg.ray and cfg.num_workers is None:
        return None
    return int(cfg.concurrency) * (int(cfg.num_workers) if cfg.ray else 1)


@dataclass
class LabelConfig:
    """Settings of one labelling run; flags of `routedvlm label` map one to one onto these fields."""

    small: str | None = field(default=None, metadata={"help": "small VLM: checkpoint folder, hub id, '<base_url>#<model "
                                                              "id>' (a served model) or 'vllm:<folder>' (an in-process "
                                                              "vLLM engine); with --large, a pair"})
    large: str | None = field(default=None, metadata={"help": "large VLM: checkpoint folder, hub id, or '<base_url>#<model "
                                                              "id>' (a served model)"})
    dataset: str | None = field(default=None, metadata={"help": "hub data set id or local parquet/JSONL file or folder"})
    out: str | None = field(default=None, metadata={"help": "labels.parquet to write"})
    models: tuple | None = field(default=None, metadata={
        "help": "a ladder of 2 to 10 models, cheapest first, instead of --small/--large: repeat --model SPEC (or "
                "--models A,B,C); they are named small, mid, large (three) or small, mid1, ..., large"})
    reasoners: tuple | None = field(default=None, metadata={
        "help": "ALIAS=SPEC, repeatable: the checkpoint (or served model) serving that ladder model's reasoning mode, "
                "e.g. --reasoner mid=Qwen/Qwen3-VL-4B-Thinking (--small-reasoner / --large-reasoner for the ends)"})
    transfer_pairs: str | None = field(default=None, metadata={
        "help": "which transfers to label, FROM:TO pairs of aliases, e.g. 'small:mid,mid:large' (default: every "
                "cheaper -> more expensive pair, N(N-1)/2 of them); 'none' for no transfers"})
    reason_models: str | None = field(default=None, metadata={
        "help": "which models label their own reasoning strategy <m>_reason, e.g. 'small,mid' (default: all); 'none'"})
    cost_models: tuple | None = field(default=None, metadata={
        "help": "ALIAS=NAME, repeatable: the profiled model of --cost that prices that ladder model"})
    estimate_only: bool = field(default=False, metadata={
        "help": "print the labelling cost (model calls per sample, and the time of one sample measured on the first "
                "one) and exit without writing anything"})
    adapter: str | None = field(default=None, metadata={"help": "data set adapter name (default: resolved)"})
    dataset_config: str | None = field(default=None, metadata={"help": "hub data set config, e.g. 'en'"})
    split: str | None = field(default=None, metadata={"help": "data set split (default: the adapter's)"})
    prompt_template: str | None = field(default=None, metadata={
        "help": "how questions become prompts: 'none' (as given), 'lmms-eval' (post prompts) or a format string "
                "with {question} (and {context}, {options}); default: the adapter's (lmms-eval for the known "
                "benchmarks, none for local data)"})
    limit: int | None = field(default=None, metadata={"help": "label only the first N samples"})
    strategies: tuple | None = field(default=None, metadata={"help": "strategy ids to run (default: all for the K grid)"})
    k_grid: tuple | None = field(default=None, metadata={"help": "K values of transfer_<K> (default 16,32,64,128,256)"})
    selector: str = field(default="prefix", metadata={"help": f"reasoning token selector: {', '.join(SELECTOR_NAMES)}"})
    shard: str | None = field(default=None, metadata={"help": "I/N: label only samples whose position % N == I"})
    resume: bool = field(default=False, metadata={"help": "finish an interrupted run with the same settings"})
    device: str = field(default="auto", metadata={"help": f"device of both models: {DEVICE_HELP}"})
    dtype: str | None = field(default=None, metadata={"help": "torch dtype name, e.g. bfloat16 (default: checkpoint's)"})
    threads: int = field(default=1, metadata={"help": "torch CPU threads: 1 (default) keeps per-sample latencies stable "
                                                      "on a shared CPU; 0 keeps torch's default (one per core)"})
    small_reasoner: str | None = field(default=None, metadata={"help": "checkpoint (or served model: '<base_url>#<model "
                                                                       "id>', or a model id on the small side's server) "
                                                                       "serving the small side's reasoning mode"})
    large_reasoner: str | None = field(default=None, metadata={"help": "the same for the large side's reasoning mode"})
    threshold: float = field(default=0.5, metadata={"help": "a strategy is correct when its score >= this"})
    max_new_tokens: int = field(default=32, metadata={"help": "max tokens of a short (direct) answer"})
    max_reason_tokens: int = field(default=512, metadata={"help": "max tokens of a reasoning run"})
    min_new_tokens: int = field(default=0, metadata={"help": "min tokens of an answer (random tiny models)"})
    min_reason_tokens: int = field(default=0, metadata={"help": "min tokens of a reasoning run (random tiny models)"})
    flush_every: int = field(default=8, metadata={"help": "store finished samples every N samples"})
    cost: str | None = field(default=None, metadata={"help": "profile.json: price stages with a fitted latency model"})
    cost_model_small: str | None = field(default=None, metadata={"help": "profiled model that prices the small side"})
    cost_model_large: str | None = field(default=None, metadata={"help": "profiled model that prices the large side"})
    encoder: str | None = field(default=None, metadata={"help": "add meaning features (feat__prompt__meaning_<i>): "
                                "each question embedded by this sentence encoder, a folder or hub id (docs/labelling.md)"})
    encoder_dims: int = field(default=16, metadata={"help": "meaning features per question: the embedding's random "
                              "projection to this many values (default 16)"})
    state_dims: int = field(default=0, metadata={"help": "add the small VLM's state features "
                            "(feat__small_direct__state_<i>: its last layer at the last prompt token of small_direct, "
                            "randomly projected to this many values; a local small model; default 0: none)"})
    progress: bool = field(default=True, metadata={"help": "show a progress bar on stderr"})
    concurrency: int | None = field(default=None, metadata={"help": f"samples in flight (default: {REMOTE_CONCURRENCY} "
                                    "when both sides are servers, else 1; local models run one sample at a time)"})
    ray: bool = field(default=False, metadata={"help": "label on a Ray cluster (pip install routedvlm[ray]): an actor "
                      "pool, one pipeline per worker; with 'vllm:<folder>' sides each worker loads its own two engines "
                      "once and keeps --concurrency samples in flight on them (docs/scale.md)"})
    ray_address: str | None = field(default=None, metadata={"help": "Ray cluster to join, e.g. 'auto' or "
                                    "'ray://head:10001' (default: start a local one)"})
    num_workers: int | None = field(default=None, metadata={"help": "Ray workers (default: cluster GPUs / "
                                    "--gpus-per-worker, else cluster CPUs)"})
    gpus_per_worker: float = field(default=0.0, metadata={"help": "GPUs per Ray worker (its models run on them; "
                                   "'vllm:' sides: both engines share the worker's GPU, so give each a "
                                   "gpu_memory_utilization in $ROUTEDVLM_VLLM_ENGINE_ARGS, e.g. '{\"gpu_memory_utilization\": 0.4}')"})

    def __post_init__(self) -> None:
        self._resolve_ladder()
        for name in ("small", "large", "dataset", "out"):
            value = getattr(self, name)
            if not isinstance(value, (str, Path)) or not str(value).strip():
                raise ConfigError(f"The `{name}` setting is required (a path or id). Got {value!r} instead.")
        from routedvlm.inference.sides.kinds import check_spec

        for alias, spec in self.ladder_specs().items():  # a URL without '#<model id>', or a kind whose package is not
            check_spec(spec, f"`{alias}` model")  # installed (vLLM), is refused here, before anything runs
        for alias, spec in self.ladder_reasoners().items():
            check_spec(spec, f"`{alias}` reasoner")
        if isinstance(self.encoder_dims, bool) or not isinstance(self.encoder_dims, int) or self.encoder_dims < 1:
            raise ConfigError(f"The `encoder_dims` setting must be a positive integer. Got {self.encoder_dims!r} instead.")
        if isinstance(self.state_dims, bool) or not isinstance(self.state_dims, int) or self.state_dims < 0:
            raise ConfigError(f"The `state_dims` setting must be a non-negative integer. Got {self.state_dims!r} instead.")
        if self.selector not in SELECTOR_NAMES:
            raise ConfigError(f"The `selector` setting must be one of {one_of(SELECTOR_NAMES)}. Got {self.selector!r} instead.")
        if not 0.0 <= float(self.threshold) <= 1.0:
            raise ConfigError(f"The `threshold` setting must be a number in [0, 1]. Got {self.threshold!r} instead.")
        for name in ("max_new_tokens", "max_reason_tokens", "flush_every"):
            if int(getattr(self, name)) <= 0:
                raise ConfigError(f"The `{name}` setting must be a positive integer. Got {getattr(self, name)!r} instead.")
        if isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 0:
            raise ConfigError(f"The `threads` setting must be an integer >= 0. Got {self.threads!r} instead.")
        self._check_scale()
        if self.limit is not None and int(self.limit) < 0:
            raise ConfigError(f"The `limit` setting must be >= 0. Got {self.limit!r} instead.")
        if self.prompt_template is not None:
            from routedvlm.inference.prompts import PromptTemplate

            PromptTemplate.parse(self.prompt_template)  # a bad template fails before any model loads
        self.shard_index, self.shard_count = parse_shard(self.shard)
        self._resolve_strategies()

    def _check_scale(self) -> None:
        if self.concurrency is None:
            self.concurrency = REMOTE_CONCURRENCY if every_side(self, "batching") else 1
        if isinstance(self.concurrency, bool) or int(self.concurrency) <= 0:
            raise ConfigError(f"The `concurrency` setting must be a positive integer. Got {self.concurrency!r} instead.")
        if self.num_workers is not None and int(self.num_workers) <= 0:
            raise ConfigError(f"The `num_workers` setting must be a positive integer. Got {self.num_workers!r} instead.")
        if float(self.gpus_per_worker) < 0:
            raise ConfigError(f"The `gpus_per_worker` setting must be >= 0. Got {self.gpus_per_worker!r} instead.")
        used = [f"--{n.replace('_', '-')}" for n in ("ray_address", "num_workers") if getattr(self, n) is not None]
        used += ["--gpus-per-worker"] if float(self.gpus_per_worker) else []
        if used and not self.ray:
            raise ConfigError(f"The `ray` setting is off but {', '.join(used)} was given; add --ray to label on a "
                              "Ray cluster, or drop those flags.")

    def _resolve_ladder(self) -> None:
        from .ladder import resolve_ladder

        self.ladder = resolve_ladder(self)  # the one view of the models every reader uses (not a flag: no field)

    @property
    def aliases(self) -> tuple:
        """The models' names, cheapest first: ('small', 'large') for a pair."""
        return self.ladder.aliases

    @property
    def is_ladder(self) -> bool:
        """More than two models (labels schema version 2)."""
        return len(self.ladder) > 2

    def ladder_specs(self) -> dict:
        """{alias: model spec} in ladder order."""
        return dict(self.ladder.specs)

    def ladder_reasoners(self) -> dict:
        """{alias: reasoner spec} of the models that have one."""
        return dict(self.ladder.reasoners)

    def ladder_cost_models(self) -> dict:
        """{alias: profiled model name} of the models `--cost` prices by a name given (`--cost-model`, ...)."""
        return dict(self.ladder.cost_models)

    def _resolve_strategies(self) -> None:
        from .ladder import bounded_grid

        grid = parse_k_grid(self.k_grid) if self.k_grid is not None else None
        if self.strategies is None:
            if self.transfer_pairs is None and self.reason_models is None and not self.is_ladder:
                self.strategies = tuple(default_strategies(grid or DEFAULT_K_GRID))
            else:
                self.strategies = tuple(bounded_grid(self, grid or DEFAULT_K_GRID))
        else:
            ids = self.strategies.split(",") if isinstance(self.strategies, str) else self.strategies
            self.strategies = tuple(dict.fromkeys(parse_strategy(s.strip()).id for s in ids if s.strip()))
            bounded = self.transfer_pairs is not None or self.reason_models is not None
            if bounded and self.strategies != tuple(bounded_grid(self, grid or DEFAULT_K_GRID)):  # (a resolved config)
                raise ConfigError("Pass either --strategies or --transfer-pairs/--reason-models (which bound the "
                                  "default grid), not both.")
            if not self.strategies:
                raise ConfigError("The `strategies` setting must name at least one strategy id, e.g. 'large_direct'.")
            off = sorted({m for s in self.strategies for m in parse_strategy(s).models} - set(self.aliases))
            if off:
                raise ConfigError(f"The `strategies` setting runs model(s) {off}, which are not on the ladder "
                                  f"{list(self.aliases)}; use strategies of these models.")
        ks = tuple(sorted({parse_strategy(s).keep_tokens for s in self.strategies if parse_strategy(s).is_transfer}
                          - {None}))
        if grid is not None and self.k_grid is not None and ks and ks != grid:
            raise ConfigError(f"The `k_grid` setting {list(grid)} does not match the transfer_<K> strategies given "
                              f"(K = {list(ks)}); pass only one of --k-grid and --strategies, or make them agree.")
        self.k_grid = ks

    def settings(self) -> dict:
        """What the run computes from (compared on --resume, recorded in the labels' metadata): every field but
        NOT_SETTINGS, local paths portable (relative to the working folder when under it, else as given)."""
        from routedvlm.router.checkpoints import portable_path

        out = {}
        for f in fields(self):
            if f.name in NOT_SETTINGS:
                continue
            value = getattr(self, f.name)
            if f.name in LADDER_SETTINGS and value is None:
                continue
            if f.name in ("small", "large", "dataset", "small_reasoner", "large_reasoner", "cost", "out") and value:
                value = portable_path(value)
            if f.name == "models" and value:
                value = [portable_path(v) for v in value]
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    def to_dict(self) -> dict:
        return asdict(self)


def parse_shard(shard) -> tuple[int, int]:
    """'I/N' -> (I, N) with 0 <= I < N; None -> (0, 1)."""
    if shard is None:
        return 0, 1
    try:
        i, n = (int(x) for x in str(shard).split("/"))
    except ValueError:
        i, n = -1, 0
    if n <= 0 or not 0 <= i < n:
        raise ConfigError(f"The `shard` setting must be 'I/N' with 0 <= I < N, e.g. '0/4'. Got {shard!r} instead.")
    return i, n
