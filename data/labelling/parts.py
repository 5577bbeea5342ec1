"""Crash-safe storage of a labelling run: rows go to `<out>.parts/part-NNNNN-<sha256>.parquet` a few at a time.

Every part and the run manifest (`manifest.json`: the run's settings and its labels metadata) is written to a
temp file and `os.replace`d, so a run killed at any point (even `kill -9`) leaves only whole files behind (and
temp files, which the next run removes). A part's name carries the sha256 of its bytes: `--resume` and the
final merge verify it, and a damaged part is set aside (`.damaged`) with a warning and its samples labelled
again. `lock` (see lock.py) keeps a second run off the folder while the first is alive.
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
from pathlib import Path

import pandas as pd

from routedvlm.errors import ConfigError, LabelsError, RoutedVLMError
from routedvlm.router.provenance import sha256_file
from .lock import RunLock, storage_error

log = logging.getLogger(__name__)
MANIFEST = "manifest.json"
LOCK = "lock"
ORDER_COLUMN = "_position"  # the sample's position in the data set; parts only, dropped at merge
PART_RE = re.compile(r"^part-(?P<n>\d+)(?:-(?P<sha>[0-9a-f]{64}))?\.parquet$")
_NUMBERED = re.compile(r"^part-(?P<n>\d+)")


def settings_diff(old: dict, new: dict) -> list[str]:
    """Human-readable differences between two settings dicts ("key: was X, now Y"), sorted by key."""
    keys = sorted(set(old) | set(new))
    return [f"{k}: was {old.get(k)!r}, now {new.get(k)!r}" for k in keys if old.get(k) != new.get(k)]


class PartStore:
    """The parts folder of one output file."""

    def __init__(self, out) -> None:
        self.out = Path(out)
        self.dir = self.out.with_name(self.out.name + ".parts")
        self.lock = RunLock(self.dir / LOCK, what=str(self.out))
        self._verified: dict[str, bool] = {}

    # ----- lifecycle ------------------------------------------------------------------------------------------
    def has_work(self) -> bool:
        """Whether the parts folder holds anything of a run (a manifest or parts), not just a lock."""
        return self.dir.is_dir() and ((self.dir / MANIFEST).exists() or bool(self.part_files()))

    def check_start(self, resume: bool) -> None:
        """Refuse to overwrite earlier work unless resuming."""
        if resume:
            return
        found = [str(p) for p in (self.out,) if p.exists()] + ([str(self.dir)] if self.has_work() else [])
        if found:
            raise ConfigError(
                f"The output already exists: {', '.join(found)}. Pass --resume to finish that run (same settings), "
                "or remove it to start over; nothing is overwritten silently."
            )

    def clean_temp(self) -> None:
        """Remove temp files a killed run left behind (ours only: `.<out name>.*.tmp`, `.*.tmp` in the parts
        folder). Call while holding the lock, so no live writer owns them."""
        stray = list(self.out.parent.glob(f".{self.out.name}.*.tmp"))
        stray += list(self.dir.glob(".*.tmp")) if self.dir.is_dir() else []
        for path in stray:
            try:
                path.unlink()
                log.info("removed %s, a temp file of an interrupted write", path)
            except OSError as exc:
                log.warning("cannot remove the stray temp file %s: %s", path, exc)

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
        text = json.dumps({"format_version": 1, "settings": settings, "metadata": metadata}, indent=2, default=str)
        self._write(self.dir / MANIFEST, lambda tmp: Path(tmp).write_text(text))

    # ----- parts ----------------------------------------------------------------------------------------------
    def part_files(self) -> list[Path]:
        """Part files in write order (damaged ones already set aside are not listed)."""
        if not self.dir.is_dir():
            return []
        parts = [p for p in self.dir.iterdir() if PART_RE.match(p.name)]
        return sorted(parts, key=lambda p: int(PART_RE.match(p.name).group("n")))

    def _intact(self, path: Path) -> bool:
        """Whether a part's bytes match the sha256 in its name; a damaged part is renamed `.damaged` (warning)."""
        if path.name in self._verified:
            return self._verified[path.name]
        want = PART_RE.match(path.name).group("sha")
        try:
            ok = want is None or sha256_file(path) == want  # parts of older versions carry no checksum
        except OSError:
            ok = False
        if not ok:
            log.warning("part %s is damaged (its sha256 does not match its name); setting it aside as .damaged, "
                        "its samples will be labelled again", path)
            try:
                path.rename(path.with_name(path.name + ".damaged"))
            except OSError as exc:
                raise storage_error(path, exc) from None
        self._verified[path.name] = ok
        return ok

    def intact_parts(self) -> list[Path]:
        return [p for p in self.part_files() if self._intact(p)]

    def read_parts(self) -> pd.DataFrame:
        """All stored rows of intact parts (duplicates by sample_id dropped, first kept), in data set order."""
        frames = [pd.read_parquet(p) for p in self.intact_parts()]
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
        for p in self.intact_parts():
            ids.update(pd.read_parquet(p, columns=["sample_id"])["sample_id"].astype(str))
        return ids

    def _next_number(self) -> int:
        numbers = [int(m.group("n")) for p in self.dir.iterdir() if (m := _NUMBERED.match(p.name))]
        return max(numbers) + 1 if numbers else 0

    def write_part(self, rows: list[dict]) -> Path | None:
        """Store rows as the next part file (atomically, its sha256 in its name); returns its path (None: no rows)."""
        if not rows:
            return None
        df = pd.DataFrame(rows)
        n = self._next_number() if self.dir.is_dir() else 0
        holder = {}

        def write(tmp):
            df.to_parquet(tmp, index=False)
            holder["path"] = self.dir / f"part-{n:05d}-{sha256_file(Path(tmp))}.parquet"
            return holder["path"]

        self._write(None, write)
        self._verified[holder["path"].name] = True
        log.debug("wrote %d rows to %s", len(rows), holder["path"])
        return holder["path"]

    def _write(self, path: Path | None, write) -> None:
        """Atomic write into the parts folder; `path` None: `write(tmp)` returns the final path. OSError -> one line."""
        target = path or self.dir / "part"
        kept = "Every sample stored before is kept."
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=f".{target.name}.", suffix=".tmp")
            os.close(fd)
        except OSError as exc:
            raise storage_error(self.dir, exc, kept=kept) from None
        try:
            result = write(tmp)
            final = path if path is not None else result
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
            os.replace(tmp, final)
        except BaseException as exc:
            if os.path.exists(tmp):
                os.unlink(tmp)
            if isinstance(exc, OSError) and not isinstance(exc, RoutedVLMError):
                raise storage_error(path or self.dir, exc, kept=kept) from None
            raise

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
