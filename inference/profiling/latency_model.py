"""A fitted latency model per VLM: predicts the cost of a pipeline stage from its token counts.

`fit_components(measurements)` fits the linear components below from a profiler's raw measurements;
`LatencyModel.load(profile_json, model=NAME)` reads them back from `profile.json` and prices stage records, so
labels can carry deterministic latencies (`routedvlm label --cost profile.json`). Pure numpy; no torch.

Components (all milliseconds, least squares on the raw measurements):
- preprocess: per image, `a + b * megapixels` (image processor on the CPU);
- vision: per image, `a + b * image_tokens` (vision encoder; image tokens = tokens the LM receives);
- prefill: per call, `a + b * tokens` (the language model's forward over the new prompt tokens);
- decode: per decode step, `ms_per_token = a + b * context_len`, where `context_len` is the number of tokens
  in the cache before the step (prompt + tokens already fed back). As in `generate`, the first output token
  comes out of the prefill, so n output tokens cost n - 1 decode steps.
Prefill after `cached_tokens` reused tokens adds one pass over the cache, priced like the context term of one
decode step (`decode.slope * cached_tokens`): a model of reading the cached keys/values once, an approximation.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
import statistics

from routedvlm.errors import ConfigError, one_of
from routedvlm.router.provenance import sha256_file

FIT_COMPONENTS = ("preprocess", "vision", "prefill", "decode")
# component -> (x column in its measurements, y column)
COMPONENT_XY = {
    "preprocess": ("megapixels", "ms"),
    "vision": ("image_tokens", "ms"),
    "prefill": ("tokens", "ms"),
    "decode": ("context_len", "ms"),
}


@dataclasses.dataclass(frozen=True)
class LinearFit:
    """y_ms = intercept + slope * x, with its fit quality on the points it was fitted to."""

    x: str = dataclasses.field(metadata={"help": "name of the predictor column (e.g. image_tokens)"})
    intercept: float = dataclasses.field(metadata={"help": "ms at x = 0"})
    slope: float = dataclasses.field(metadata={"help": "ms per unit of x"})
    r2: float | None = dataclasses.field(default=None, metadata={"help": "coefficient of determination"})
    mape: float | None = dataclasses.field(default=None, metadata={"help": "mean absolute % error"})
    n: int = dataclasses.field(default=0, metadata={"help": "number of points fitted"})

    def __call__(self, x: float) -> float:
        return self.intercept + self.slope * float(x)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict, *, where: str = "fit") -> "LinearFit":
        missing = [k for k in ("x", "intercept", "slope") if k not in d]
        if missing:
            raise ConfigError(f"The `{where}` entry of the profile must have keys 'intercept', 'slope' and 'x'. "
                              f"Missing {missing}; re-run `routedvlm profile` to regenerate the file.")
        return cls(**{k: d[k] for k in ("x", "intercept", "slope", "r2", "mape", "n") if k in d})


def _nonneg_line(x, y) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line with both coefficients >= 0 (times cannot shrink with size)."""
    import numpy as np

    if np.unique(x).size < 2:
        return max(float(y.mean()), 0.0), 0.0
    slope, intercept = (float(v) for v in np.polyfit(x, y, 1))
    if slope >= 0 and intercept >= 0:
        return intercept, slope
    candidates = [(max(float(y.mean()), 0.0), 0.0)]  # flat
    if float((x * x).sum()) > 0:
        candidates.append((0.0, max(float((x * y).sum() / (x * x).sum()), 0.0)))  # through the origin
    return min(candidates, key=lambda c: float(((y - c[0] - c[1] * x) ** 2).sum()))


def fit_linear(x, y, x_name: str) -> LinearFit:
    """Line through the per-x medians of (x, y), with intercept and slope >= 0; R² and MAPE on all points.

    Medians make one slow repeat (a busy machine) harmless; a single distinct x gives slope 0 and R² None.
    """
    import numpy as np

    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if x.size == 0 or x.shape != y.shape:
        raise ConfigError(f"fit_linear needs equally long, non-empty x and y for {x_name!r}. "
                          f"Got {x.size} x and {y.size} y values instead.")
    ux = np.unique(x)
    med = np.array([np.median(y[x == v]) for v in ux])
    intercept, slope = _nonneg_line(ux, med)
    pred = intercept + slope * x
    ss_res = float(((y - pred) ** 2).sum())
    ss_tot = float(((y - y.mean()) ** 2).sum())
    if ux.size < 2:
        r2 = None  # x never varied: nothing to explain
    else:
        r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else 0.0)
    nz = np.abs(y) > 1e-12
    mape = float(np.mean(np.abs((y[nz] - pred[nz]) / y[nz])) * 100) if nz.any() else None
    return LinearFit(x=x_name, intercept=intercept, slope=slope, r2=r2, mape=mape, n=int(x.size))


def fit_components(measurements: dict) -> dict:
    """Fit every component that has measurements: {component: LinearFit.to_dict()}.

    measurements: {component: [{x column: ..., "ms": ...}, ...]} with the columns of `COMPONENT_XY`.
    """
    fits = {}
    for comp, (xcol, ycol) in COMPONENT_XY.items():
        rows = measurements.get(comp) or []
        if rows:
            fits[comp] = fit_linear([r[xcol] for r in rows], [r[ycol] for r in rows], xcol).to_dict()
    return fits


def decode_sum_ms(fit: LinearFit, n_steps: int, context_len: int) -> float:
    """Sum of a + b * (context_len + i) for i in 0..n_steps-1 (closed form)."""
    n = max(int(n_steps), 0)
    return n * fit.intercept + fit.slope * (n * context_len + n * (n - 1) / 2)


def profile_hash(profile_json) -> str:
    """sha256 of the profile file's bytes (or of the canonical JSON of a dict): recorded in labels' metadata."""
    if isinstance(profile_json, dict):
        return hashlib.sha256(json.dumps(profile_json, sort_keys=True).encode()).hexdigest()
    return sha256_file(profile_json)


def read_profile(profile_json) -> dict:
    """Load a profile.json (path) or pass a dict through; clear errors for missing or malformed files."""
    if isinstance(profile_json, dict):
        return profile_json
    path = pathlib.Path(profile_json)
    if not path.is_file():
        raise ConfigError(f"The profile file {str(path)!r} does not exist. "
                          f"Create it with `routedvlm profile --model PATH --out {path}`.")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"The profile file {str(path)!r} is not valid JSON ({exc}); re-run `routedvlm profile`.") from exc
    if not isinstance(data, dict) or not isinstance(data.get("models"), dict) or not data["models"]:
        raise ConfigError(f"The profile file {str(path)!r} must hold a non-empty 'models' object; "
                          f"re-run `routedvlm profile`.")
    return data


@dataclasses.dataclass
class LatencyModel:
    """The fitted cost of one model's pipeline stages; build with `LatencyModel.load(profile_json, model=NAME)`."""

    name: str
    fits: dict  # component -> LinearFit
    default_image_tokens: int = 0  # used for a record that encoded images but does not say how many tokens

    def __post_init__(self):
        missing = [c for c in ("vision", "prefill", "decode") if c not in self.fits]
        if missing:
            raise ConfigError(f"The latency model of {self.name!r} needs fits for 'decode', 'prefill' and 'vision'. "
                              f"Missing {missing}; profile the model with images and more than one output token.")

    @classmethod
    def load(cls, profile_json, model: str | None = None) -> "LatencyModel":
        """Read model `model` (a key of the profile's 'models'; optional when it holds one) from a profile."""
        data = read_profile(profile_json)
        models = data["models"]
        if model is None:
            if len(models) != 1:
                raise ConfigError(f"The `model` parameter of LatencyModel.load is required: the profile holds "
                                  f"{len(models)} models, name one of {one_of(models)}.")
            model = next(iter(models))
        if model not in models:
            raise ConfigError(f"The `model` parameter of LatencyModel.load must be one of {one_of(models)}. "
                              f"Got {model!r} instead.")
        entry = models[model]
        fits = {c: LinearFit.from_dict(f, where=f"models.{model}.fit.{c}") for c, f in (entry.get("fit") or {}).items()}
        return cls(name=model, fits=fits, default_image_tokens=int(entry.get("reference", {}).get("image_tokens", 0)))

    def preprocess_ms(self, n_images: int, megapixels: float) -> float:
        """Image processor time for `n_images` images of `megapixels` each (0 if not profiled)."""
        fit = self.fits.get("preprocess")
        return 0.0 if fit is None or n_images <= 0 else n_images * max(fit(megapixels), 0.0)

    def vision_ms(self, n_images: int, image_tokens: int) -> float:
        """Vision encoder time for `n_images` images of `image_tokens` tokens each."""
        return 0.0 if n_images <= 0 else n_images * max(self.fits["vision"](image_tokens), 0.0)

    def prefill_ms(self, n_tokens: int, cached_tokens: int = 0) -> float:
        """Prefill of `n_tokens` new tokens after `cached_tokens` reused ones (see the module docstring)."""
        if n_tokens <= 0:
            return 0.0
        return max(self.fits["prefill"](n_tokens), 0.0) + max(self.fits["decode"].slope, 0.0) * max(cached_tokens, 0)

    def decode_ms(self, n_tokens: int, context_len: int) -> float:
        """Decode time of `n_tokens` output tokens after a prompt of `context_len` tokens: the first token comes
        out of the prefill, then n_tokens - 1 steps with contexts context_len, context_len + 1, ..."""
        return max(decode_sum_ms(self.fits["decode"], int(n_tokens) - 1, context_len), 0.0)

    def stage_ms(self, record: dict) -> float:
        """Cost of one pipeline trace record (keys `vision_ms`, `prefill_tokens`, `cached_tokens`, `decode_tokens`).

        The image encoder is priced when the record encoded images (`vision_ms` > 0, or `n_images` > 0): per image
        `record["image_tokens"]` tokens (total over `n_images`), else the profile's reference image tokens. Decode
        starts with context `cached_tokens + prefill_tokens`. Measured times in the record are otherwise ignored.
        """
        prefill = int(record.get("prefill_tokens") or 0)
        cached = int(record.get("cached_tokens") or 0)
        decode = int(record.get("decode_tokens") or 0)
        n_images = int(record.get("n_images") or (1 if float(record.get("vision_ms") or 0) > 0 else 0))
        per_image = self.default_image_tokens
        if record.get("image_tokens") and n_images:
            per_image = int(record["image_tokens"]) / n_images
        return (self.vision_ms(n_images, per_image) + self.prefill_ms(prefill, cached)
                + self.decode_ms(decode, cached + prefill))

    def end_to_end_ms(self, output_tokens: int, prompt_tokens: int, image_tokens: int, n_images: int = 1) -> float:
        """One cold call: vision + prefill of `prompt_tokens` (all prompt tokens, image ones included) + decode."""
        return (self.vision_ms(n_images, image_tokens) + self.prefill_ms(prompt_tokens)
                + self.decode_ms(output_tokens, prompt_tokens))


def models_by_size(profile: dict) -> list[str]:
    """Model names ordered from fewest to most parameters (the name breaks ties); when a model's parameters are
    unknown (a server model), by its fitted decode cost per token instead (the slower one counts as larger)."""
    models = profile["models"]
    if any(e.get("parameters") is None for e in models.values()):
        return sorted(models, key=lambda n: (float(((models[n].get("fit") or {}).get("decode") or {}).get("intercept", 0)), n))
    return sorted(models, key=lambda n: (models[n].get("parameters") or 0, n))


def _match_path(models: dict, path) -> str | None:
    if path is None:
        return None
    from routedvlm.router.checkpoints import portable_path

    want = str(path).rstrip("/")
    for name, entry in models.items():
        recorded = str(entry.get("path", "")).rstrip("/")
        if recorded == want or (recorded and portable_path(recorded) == portable_path(want)):
            return name
    base = pathlib.Path(want).name
    return base if base in models else None


def cost_stage_fn(profile_json, *, small: str | None = None, large: str | None = None,
                  small_path=None, large_path=None, ladder: dict | None = None):
    """`(stage_ms(side, record), metadata)` for a labeller: prices "small"/"large" records with their fitted models
    (and a ladder's other models: `ladder` = {alias: (profiled model name or None, its path)}).

    Which profiled model serves a side: the name given (`small`/`large`), else the profiled model whose path (or
    folder name) equals `small_path`/`large_path`, else, for a profile of exactly two models, the one with fewer
    parameters is "small". metadata: {"latency_source": "cost-model", "cost_profile_sha256", "cost_models"}.
    """
    data = read_profile(profile_json)
    models = data["models"]
    by_size = models_by_size(data)
    chosen = {"small": small or _match_path(models, small_path), "large": large or _match_path(models, large_path)}
    for side, idx in (("small", 0), ("large", -1)):
        if chosen[side] is None and len(by_size) == 2:
            chosen[side] = by_size[idx]
        if chosen[side] is None:
            raise ConfigError(f"Cannot tell which model of the profile prices the {side} side: the profile holds "
                              f"{one_of(models)}. Pass --cost-model-{side} NAME.")
    for alias, (name, path) in (ladder or {}).items():  # a ladder's other models: {alias: (name or None, path)}
        if alias not in chosen:
            chosen[alias] = name or _match_path(models, path)
            if chosen[alias] is None:
                raise ConfigError(f"Cannot tell which model of the profile prices the ladder's {alias!r} model: the "
                                  f"profile holds {one_of(models)}. Pass --cost-model {alias}=NAME.")
    lms = {side: LatencyModel.load(data, model=name) for side, name in chosen.items()}

    def stage_ms(side: str, record: dict) -> float:
        if side not in lms:
            raise ConfigError(f"The `model_side` argument must be one of {one_of(lms)}. Got {side!r} instead.")
        return lms[side].stage_ms(record)

    meta = {"latency_source": "cost-model", "cost_profile_sha256": profile_hash(profile_json), "cost_models": chosen}
    return stage_ms, meta


def decode_points(runs: list) -> list:
    """Expand decode runs ({"context_start", "step_ms": [...]}) into fit points {"context_len", "ms"}."""
    return [{"context_len": r["context_start"] + j, "ms": ms} for r in runs for j, ms in enumerate(r["step_ms"])]


def end_to_end_mape(meas: dict, fit: dict) -> float | None:
    """Mean absolute % error of the fitted model (vision + prefill + decode) on the measured end-to-end calls."""
    lm = LatencyModel("check", {c: LinearFit.from_dict(f) for c, f in fit.items()})
    calls = {(r["image_size"], r["prompt_tokens"], r["repeat"]): r for r in meas["prefill"]}
    vision = {(r["image_size"], r["prompt_tokens"], r["repeat"]): r["image_tokens"] for r in meas["vision"]}
    errs = []
    for r in meas["end_to_end"]:
        key = (r["image_size"], r["prompt_tokens"], r["repeat"])
        tokens = calls[key]["tokens"]
        pred = lm.vision_ms(1, vision[key]) + lm.prefill_ms(tokens) + lm.decode_ms(r["output_tokens"], tokens)
        if r["ms"] > 0:
            errs.append(abs(pred - r["ms"]) / r["ms"] * 100)
    return round(statistics.fmean(errs), 3) if errs else None
