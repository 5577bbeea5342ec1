"""Crash-safe storage of a labelling run: rows go to `<out>.parts/part-NNNNN.parquet` a few samples at a time.

Every part and the run manifest (`manifest.json`: the run's settings and its labels metadata) is written to a
temp file and `os.replace`d, so a run killed at any point (even `kill -9`) leaves only whole files behind; a
rerun with `--resume` reads the sample ids already stored and skips them. `merge_parts` joins them at the end.
"""
from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pandas as pd

from ..router.errors import ConfigError, LabelsError

log = logging.getLogger(__name__)
MANIFEST = "manifest.json"
ORDER_COLUMN = "_position"  # the sample's position in the data set; parts only, dropped at merge


def _atomic_write(path: Path, write) -> None:
    """Call `write(tmp_path)` and move the result onto `path` atomically (see `labels.atomic_write`)."""
    from .labels import atomic_write

    atomic_write(path, write)


def settings_diff(old: dict, new: dict) -> list[str]:
    """Human-readable differences between two settings dicts ("key: was X, now Y"), sorted by key."""
    keys = sorted(set(old) | set(new))
    return [f"{k}: was {old.get(k)!r}, now {new.get(k)!r}" for k in keys if old.get(k) != new.get(k)]


class PartStore:
    """The parts folder of one output file."""

    def __init__(self, out) -> None:
        self.out = Path(out)
        self.dir = self.out.with_name(self.out.name + ".parts")

    # ----- lifecycle ------------------------------------------------------------------------------------------
    def check_start(self, resume: bool) -> None:
        """Refuse to overwrite earlier work unless resuming."""
        if resume:
            return
        found = [str(p) for p in (self.out, self.dir) if p.exists()]
        if found:
            raise ConfigError(
                f"The output already exists: {', '.join(found)}. Pass --resume to finish that run (same settings), "
                "or remove it to start over; nothing is overwritten silently."
            )

    def manifest(self) -> dict | None:
        path = self.dir / MANIFEST
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise LabelsError(f"The run manifest {str(path)!r} is unreadable ({exc}); remove {str(self.dir)!r} "
                              "to start over.") from None

    def check_settings(self, settings: dict, previous: dict | None, where: str) -> None:
        """Raise ConfigError when resuming with settings that differ from the earlier run's."""
        if previous is None:
            return
        diff = settings_diff(previous, settings)
        if diff:
            raise ConfigError(
                f"--resume needs the same settings as the run that wrote {where}; these differ: {'; '.join(diff)}. "
                f"Rerun with the original settings, or remove {where} to start over."
            )

    def write_manifest(self, settings: dict, metadata: dict) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"format_version": 1, "settings": settings, "metadata": metadata}, indent=2, default=str)
        _atomic_write(self.dir / MANIFEST, lambda tmp: Path(tmp).write_text(text))

    # ----- parts ----------------------------------------------------------------------------------------------
    def part_files(self) -> list[Path]:
        return sorted(self.dir.glob("part-*.parquet")) if self.dir.is_dir() else []

    def read_parts(self) -> pd.DataFrame:
        """All stored rows (duplicates by sample_id dropped, first kept), in data set order."""
        frames = [pd.read_parquet(p) for p in self.part_files()]
        frames = [f for f in frames if len(f)]
        if not frames:
            return pd.DataFrame()
        df = pd.concat(frames, ignore_index=True)
        dup = df["sample_id"].duplicated()
        if dup.any():
            log.warning("dropping %d duplicate rows found in %s", int(dup.sum()), self.dir)
            df = df[~dup]
        return df.sort_values(ORDER_COLUMN, kind="stable").reset_index(drop=True)

    def done_ids(self) -> set:
        ids = set()
        for p in self.part_files():
            ids.update(pd.read_parquet(p, columns=["sample_id"])["sample_id"].astype(str))
        return ids

    def write_part(self, rows: list[dict]) -> Path | None:
        """Store rows as the next part file (atomically); returns its path (None for no rows)."""
        if not rows:
            return None
        self.dir.mkdir(parents=True, exist_ok=True)
        existing = self.part_files()
        n = int(existing[-1].stem.split("-")[1]) + 1 if existing else 0
        path = self.dir / f"part-{n:05d}.parquet"
        df = pd.DataFrame(rows)
        _atomic_write(path, lambda tmp: df.to_parquet(tmp, index=False))
        log.debug("wrote %d rows to %s", len(rows), path)
        return path

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
