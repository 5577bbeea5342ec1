"""Where the demo's training labels come from: the bundled labels of the toy `label` split when they are exactly what
the demo would label (the default run), else the labeller run now (`--full`, `--quick`, other sizes, seeds, pairs or
`--cost`). The eval split is always labelled live (toy.py), so every run shows label -> train-router -> RoutedVLM.
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path

BUNDLED_N_LABEL = 1000  # the bundled labels: the toy `label` split, 1000 samples of seed 0


def bundled_labels(cfg) -> Path | None:
    """The bundled labels when they are exactly what `label_split(cfg, "label", ...)` would write (the default run:
    1000 `label` samples of seed 0 on the shipped pair, wall-clock latencies), else None."""
    from routedvlm.data.labelling.metadata import model_revision
    from routedvlm.data.labels.schema import read_labels
    from routedvlm.data.toyworld.make_labels import checkpoint_pair, toyworld_dir

    path = toyworld_dir() / "labels.parquet"
    if cfg.full or cfg.quick or cfg.cost or cfg.seed != 0 or cfg.n_label != BUNDLED_N_LABEL or not path.is_file():
        return None
    _, meta = read_labels(path)
    revisions = {side: model_revision(p) for side, p in zip(("small", "large"), checkpoint_pair(cfg.checkpoints))}
    same = all(meta.get("models", {}).get(side, {}).get("revision") == r for side, r in revisions.items())
    return path if same and meta.get("n_samples") == BUNDLED_N_LABEL else None


def training_labels(cfg, say) -> Path:
    """The `label` split's labels under `cfg.out`: the bundled ones copied when they fit (`bundled_labels`), else
    labelled now."""
    bundled = bundled_labels(cfg)
    if bundled is None:
        say(f"[1/4] labelling {cfg.n_label} toy `label` samples (every strategy, K grid 4,8,16,all) ...")
        return label_split(cfg, "label", cfg.n_label, say)[1]
    out = Path(cfg.out) / "labels-label.parquet"
    _fresh(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(bundled, out)
    say(f"[1/4] the {cfg.n_label} toy `label` samples: the bundled labels ({bundled.name}: the same samples, labeller "
        "and shipped pair; `--full` labels them again); the eval split is labelled live in step 3")
    return out


def _fresh(*paths: Path) -> None:
    """Remove this demo's own outputs of an earlier run (labels refuse to overwrite)."""
    for p in paths:
        for q in (p, p.with_name(p.name + ".parts")):
            if q.is_dir():
                shutil.rmtree(q)
            elif q.exists():
                q.unlink()


def label_split(cfg, split: str, n: int, say) -> tuple[Path, Path]:
    """(data set, labels) of `n` toy `split` samples under `cfg.out`, labelled with the project's labeller."""
    from routedvlm.data.toyworld.make_labels import label_dataset, write_split

    out = Path(cfg.out)
    labels = out / f"labels-{split}.parquet"
    _fresh(labels)
    dataset = write_split(split, n, cfg.seed, out / "data")
    t0 = time.perf_counter()
    summary = label_dataset(dataset, labels, checkpoints=cfg.checkpoints, progress=cfg.progress, cost=cfg.cost)
    say(f"{summary.line()} in {time.perf_counter() - t0:.0f} s")
    return dataset, labels

