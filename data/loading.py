"""Load samples from a hub data set (by id) or local files (parquet, JSONL, imagefolder, save_to_disk)
through an adapter; `SampleSource` records where samples came from so they can be reloaded by id.
"""
from __future__ import annotations

import io
import logging
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from routedvlm.errors import ConfigError, DatasetError, ImageLoadError
from .adapters import Adapter, resolve_adapter, row_to_sample
from .sample import Sample

log = logging.getLogger(__name__)
_FILE_BUILDERS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".csv": "csv"}


@dataclass
class SampleSource:
    """Where samples come from; `load_samples(**source.to_dict(), ids=[...])` reloads them."""

    dataset: str = field(metadata={"help": "Hub id (lmms-lab/X, ...) or a local file/folder path."})
    config: str | None = field(default=None, metadata={"help": "Hub config (e.g. 'en' for MMBench)."})
    split: str | None = field(default=None, metadata={"help": "Split; None -> the adapter's default."})
    adapter: str | None = field(default=None, metadata={"help": "Adapter name; None -> resolved."})
    limit: int | None = field(default=None, metadata={"help": "Keep only the first N rows."})

    def __post_init__(self) -> None:
        if not isinstance(self.dataset, (str, Path)) or not str(self.dataset).strip():
            raise ConfigError(f"The `dataset` must be a hub id or a path; got {self.dataset!r}.")
        self.dataset = str(self.dataset)
        if self.limit is not None and (isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 0):
            raise ConfigError(f"The `limit` must be a non-negative integer or None; got {self.limit!r}.")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "SampleSource":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"Unknown sample source keys {unknown}; valid keys are {sorted(known)}.")
        return cls(**data)


def open_local(path: Path, split: str | None):
    """(datasets.Dataset, split name) of a local file or folder (parquet, JSONL, CSV, imagefolder, save_to_disk)."""
    import datasets

    if path.is_dir() and ((path / "dataset_dict.json").exists() or (path / "state.json").exists()):
        obj = datasets.load_from_disk(str(path))
        if isinstance(obj, datasets.DatasetDict):
            split = split or next(iter(obj))
            if split not in obj:
                raise DatasetError(f"The `split` must be one of {sorted(obj)} for {path}; got {split!r}.")
            return obj[split], split
        return obj, split or "train"
    split = split or "train"
    if path.is_file():
        builder = _FILE_BUILDERS.get(path.suffix.lower())
        if builder is None:
            raise DatasetError(
                f"Cannot read {path}: the file must end in {', '.join(sorted(_FILE_BUILDERS))}, "
                "or pass a folder (imagefolder or save_to_disk)."
            )
        return datasets.load_dataset(builder, data_files={split: [str(path)]}, split=split), split
    parquet = sorted(path.rglob("*.parquet"))
    jsonl = [f for f in sorted(path.glob("*.jsonl")) if f.name != "metadata.jsonl"]  # imagefolder metadata
    if parquet or jsonl:
        builder, files = ("parquet", parquet) if parquet else ("json", jsonl)
        return datasets.load_dataset(builder, data_files={split: [str(f) for f in files]}, split=split), split
    return datasets.load_dataset("imagefolder", data_dir=str(path), split=split), split


def open_hub(dataset: str, adapter: Adapter, config: str | None, split: str | None):
    """(datasets.Dataset, config, split) of a hub data set (from the local cache when offline)."""
    import datasets

    config = config or adapter.default_config
    split = split or adapter.default_split
    try:
        ds = datasets.load_dataset(dataset, config, split=split)
    except Exception as exc:  # network, cache, config or split problems: report them as one error
        raise DatasetError(
            f"Cannot load hub data set {dataset!r} (config {config!r}, split {split!r}): {exc}. "
            "Check the id, config and split, or download it once with network access (HF_HUB_OFFLINE=0)."
        ) from exc
    return ds, config, split


def load_sample_image(value, base_dir: Path | None, sample_id: str):
    """PIL images stay; bytes (or {'bytes', 'path'}) are decoded; paths are resolved and must exist."""
    from PIL import Image

    if isinstance(value, Image.Image):
        return value
    if isinstance(value, dict):
        value = value.get("bytes") or value.get("path")
    if isinstance(value, (bytes, bytearray)):
        try:
            image = Image.open(io.BytesIO(value))
            image.load()
            return image
        except Exception as exc:
            raise ImageLoadError(f"Sample {sample_id!r}: its image bytes cannot be decoded ({exc}).") from exc
    path = Path(str(value)).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    if not path.exists():
        raise ImageLoadError(
            f"Sample {sample_id!r}: image file {str(path)!r} does not exist. Image paths in local files "
            "are read relative to the data file's folder."
        )
    return str(path)


def select_rows(ds, adapter: Adapter, split: str, ids, limit) -> list[int]:
    """Row positions to load: the first `limit` rows, or those of them whose ids are `ids` (in that order); sample
    ids must be unique."""
    id_col = adapter.column("id", ds.column_names)
    all_ids = [str(v) for v in ds[id_col]] if id_col else [f"{split}-{i}" for i in range(len(ds))]
    if id_col and len(set(all_ids)) != len(all_ids):
        seen, dups = set(), []
        for sid in all_ids:
            if sid in seen and sid not in dups:
                dups.append(sid)
            seen.add(sid)
        raise DatasetError(
            f"Sample ids must be unique; column `{id_col}` repeats {dups[:5]}. Remove the duplicates "
            "or drop the column to get `<split>-<row>` ids."
        )
    if limit is not None:
        all_ids = all_ids[:limit]
    if ids is None:
        return list(range(len(all_ids)))
    position = {sid: i for i, sid in enumerate(all_ids)}
    wanted = [str(i) for i in ids]
    missing = [w for w in wanted if w not in position]
    if missing:
        raise DatasetError(
            f"{len(missing)} requested sample ids are not in the data set (first: {missing[:5]}); "
            "reload with the same dataset, config, split, adapter and limit that produced them."
        )
    return [position[w] for w in wanted]


def load_samples_with_source(dataset, *, config=None, split=None, limit=None, adapter=None, ids=None,
                             prompt_template=None):
    """Like `load_samples`, also returning the resolved `SampleSource` (adapter, config, split filled in)."""
    source = SampleSource(dataset, config, split, adapter, limit)
    local = Path(source.dataset).expanduser()
    base_dir = None
    if local.exists():
        ds, split = open_local(local, split)
        chosen = resolve_adapter(source.dataset, adapter, config=config, columns=ds.column_names)
        base_dir = local.parent if local.is_file() else local
    else:
        chosen = resolve_adapter(source.dataset, adapter, config=config)
        ds, config, split = open_hub(source.dataset, chosen, config, split)
    missing = chosen.missing_columns(ds.column_names)
    if missing:
        raise DatasetError(
            f"Data set {source.dataset!r} (split {split!r}) lacks columns that adapter {chosen.name!r} needs: "
            f"missing {missing}; found {sorted(ds.column_names)}. Pass the right adapter= or rename the columns."
        )
    indices = select_rows(ds, chosen, split, ids, limit)
    id_col = chosen.column("id", ds.column_names)
    template = chosen.template(prompt_template)
    samples = []
    for index, row in zip(indices, ds.select(indices)):
        sample_id = str(row[id_col]) if id_col else f"{split}-{index}"
        sample = row_to_sample(chosen, row, sample_id)
        sample.images = [load_sample_image(img, base_dir, sample_id) for img in sample.images]
        sample.template = template
        if chosen.name == "local":
            sample.dataset = local.stem if local.exists() else sample.dataset
        samples.append(sample)
    log.info("Loaded %d samples from %s with adapter %r", len(samples), source.dataset, chosen.name)
    resolved = SampleSource(source.dataset, config, split, chosen.name, limit)
    return samples, resolved


def load_samples(dataset, *, config=None, split=None, limit=None, adapter=None, ids=None,
                 prompt_template=None) -> list[Sample]:
    """Samples of a data set through its adapter.

    `dataset` is a hub id (`lmms-lab/X`, `lmms-lab-encoder/X`, `HuggingFaceM4/ChartQA`,
    `AI4Math/MathVista`, `xai-org/RealworldQA`) or a local parquet/JSONL file, a folder of them, an
    imagefolder, or a `save_to_disk` folder. `limit` keeps the first N rows; `ids` then picks exactly
    those sample ids (in that order) among them. Sample ids are the data set's id column or
    `<split>-<row>`. `prompt_template` ('none', 'lmms-eval', a format string with {question}; None: the
    adapter's default, lmms-eval for the known benchmarks and none for local data) decides `Sample.prompt`.
    """
    return load_samples_with_source(dataset, config=config, split=split, limit=limit, adapter=adapter, ids=ids,
                                    prompt_template=prompt_template)[0]
