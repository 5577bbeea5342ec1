"""The samples of a labelling run: the data set opened once, rows decoded one at a time (`open_source`)."""
from __future__ import annotations

from pathlib import Path

from ..loading import SampleSource
from .config import LabelConfig


def open_source(cfg: LabelConfig):
    """(resolved SampleSource, [(position, sample_id)], load(position) -> Sample). Rows are decoded one at a time,
    so a broken row fails alone (its load raises) instead of failing the whole data set."""
    from .. import loading
    from ..adapters import resolve_adapter, row_to_sample

    source = SampleSource(cfg.dataset, cfg.dataset_config, cfg.split, cfg.adapter, cfg.limit)
    local, base_dir, config = Path(source.dataset).expanduser(), None, source.config
    if local.exists():
        ds, split = loading.open_local(local, source.split)
        adapter = resolve_adapter(source.dataset, source.adapter, config=config, columns=ds.column_names)
        base_dir = local.parent if local.is_file() else local
    else:
        adapter = resolve_adapter(source.dataset, source.adapter, config=config)
        ds, config, split = loading.open_hub(source.dataset, adapter, config, source.split)
    missing = adapter.missing_columns(ds.column_names)
    if missing:
        from routedvlm.errors import DatasetError

        raise DatasetError(f"Data set {source.dataset!r} lacks columns adapter {adapter.name!r} needs: {missing}; "
                           f"found {sorted(ds.column_names)}. Pass --adapter or rename the columns.")
    positions = loading.select_rows(ds, adapter, split, None, source.limit)
    id_col = adapter.column("id", ds.column_names)
    ids = [str(v) for v in ds[id_col]] if id_col else None
    keyed = [(i, ids[i] if ids else f"{split}-{i}") for i in positions]

    name = local.stem if adapter.name == "local" and local.exists() else adapter.name
    template = adapter.template(cfg.prompt_template)

    def load(position: int, sample_id: str):
        sample = row_to_sample(adapter, ds[int(position)], sample_id)
        sample.images = [loading.load_sample_image(img, base_dir, sample_id) for img in sample.images]
        sample.template = template
        sample.dataset = name if adapter.name == "local" else sample.dataset
        return sample

    load.dataset_name = name  # for rows whose sample cannot be loaded
    return SampleSource(source.dataset, config, split, adapter.name, source.limit), keyed, load
