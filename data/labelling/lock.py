"""One labelling run per output: an OS file lock (`flock`) on `<out>.parts/lock`, which names its owner.

The kernel drops the lock when its process dies (also `kill -9`), so a second run on the same output refuses
while the first is alive and takes over cleanly when it is dead; the host, PID and start time written into the
file only serve the messages. Storage failures (read-only folder, disk full) become one-line `StorageError`s.
"""
from __future__ import annotations

import errno
import json
import logging
import os
import socket
import sys
import time
from pathlib import Path

from routedvlm.errors import OutputLockedError, StorageError

log = logging.getLogger(__name__)
_HINTS = {
    errno.ENOSPC: "the disk is full: free some space",
    errno.EDQUOT: "the disk quota is exhausted: free some space",
    errno.EROFS: "the file system is read-only: pass an --out on a writable disk",
    errno.EACCES: "the folder is not writable: fix its permissions or pass another --out",
    errno.EPERM: "the folder is not writable: fix its permissions or pass another --out",
}


def storage_error(path, exc: OSError, *, kept: str = "") -> StorageError:
    """A one-line StorageError naming `path`, the OS's reason and what to do; `kept` says what is still safe."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    hint = _HINTS.get(exc.errno, "check the disk and the folder's permissions")
    text = f"Cannot write {str(path)!r}: {reason} ({hint}), then rerun the same command with --resume."
    return StorageError(" ".join((text + (" " + kept if kept else "")).split()))


class RunLock:
    """`with RunLock(path):` holds an exclusive flock on `path` (created with its folder) or raises
    OutputLockedError naming the live owner. `what` is the output the lock protects (for messages)."""

    def __init__(self, path, what: str) -> None:
        self.path, self.what, self._fd = Path(path), what, None

    def __enter__(self) -> "RunLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def acquire(self) -> None:
        import fcntl

        for _ in range(20):  # the folder may be removed by a finishing run between open and flock: retry
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise storage_error(self.path, exc) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = _read_owner(fd)
                os.close(fd)
                raise OutputLockedError(
                    f"{self.what} is being written by another labelling run ({_describe(owner)}); wait for it to "
                    "finish or stop it, then rerun (with --resume to finish its work). Two runs on one output "
                    "would lose samples.") from None
            if _same_file(fd, self.path):
                self._fd = fd
                self._take_over(_read_owner(fd))
                return
            os.close(fd)
        raise OutputLockedError(f"Could not lock {str(self.path)!r}: it keeps being removed; is another run finishing?")

    def _take_over(self, previous: dict | None) -> None:
        if previous and previous.get("pid") and not previous.get("released"):
            log.info("taking over %s from a run that is no longer alive (%s)", self.what, _describe(previous))
        owner = {"host": socket.gethostname(), "pid": os.getpid(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                 "command": " ".join(sys.argv)[:300]}
        try:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, json.dumps(owner).encode(), 0)
        except OSError as exc:
            self.release()
            raise storage_error(self.path, exc) from None

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, json.dumps({"released": True}).encode(), 0)
        except OSError:
            pass  # the folder may already be gone (a finished run removes it)
        os.close(self._fd)  # closing drops the flock
        self._fd = None


def _same_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _read_owner(fd: int) -> dict | None:
    try:
        data = json.loads(os.pread(fd, 4096, 0) or b"null")
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _describe(owner: dict | None) -> str:
    if not owner or not owner.get("pid"):
        return "owner unknown"
    return f"PID {owner['pid']} on host {owner.get('host', '?')}, started {owner.get('started', '?')}"
