"""Room on the local weight cache's disk: least recently used models go before a download when the
filesystem is fuller than ``SIE_DISK_PRESSURE_THRESHOLD_PERCENT``.

A node that serves many models over weeks fills its disk one download at a time; without this the
next download fails half way with ENOSPC. "Used" is when the server last resolved the model's weights:
a marker file (``.sie-last-used``) in the model's cache folder is touched on every resolve, because
access times are unreliable (most filesystems are mounted ``noatime`` or ``relatime``). A folder without
a marker (written by another tool) counts by its own modification time.

Never evicted: the model being fetched, and every model the ``in_use`` hook names (the lead's engine
passes the hub ids of the models loaded or loading now: their files may still be read, by a LoRA or a
tokenizer, and a reload after eviction should not have to download again).

When the eviction cannot free what a fetch needs, ``require_room`` refuses it before a byte is written
(``DiskFull``, naming the disk, the room needed and what is free), rather than let it fill the disk
and fail half way.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

from sie.weights.errors import DiskFull
from sie.weights.progress import megabytes

log = logging.getLogger(__name__)

MARKER = ".sie-last-used"
PREFIX = "models--"


def folder_name(hf_id: str) -> str:
    """The hub-cache folder of a model id: ``models--org--name``."""
    return PREFIX + hf_id.replace("/", "--")


def hf_id_of(folder: Path) -> str:
    return folder.name.removeprefix(PREFIX).replace("--", "/")


def used_percent(path: Path) -> float:
    usage = shutil.disk_usage(path)
    return 100.0 * usage.used / usage.total if usage.total else 0.0


def mount_point(path: Path) -> Path:
    """The mount point of the filesystem ``path`` is on (``path`` itself, or its nearest existing
    parent, when that is a mount): "the disk" a log line names."""
    current = path.resolve()
    while not current.exists() and current != current.parent:
        current = current.parent
    while not os.path.ismount(current) and current != current.parent:
        current = current.parent
    return current


def nothing_in_use() -> Collection[str]:
    return ()


@dataclass(frozen=True)
class DiskCache:
    """LRU eviction over one hub-layout cache folder. ``in_use`` returns hub ids never to evict."""

    root: Path
    enabled: bool = True
    threshold_percent: float = 85.0
    in_use: Callable[[], Collection[str]] = field(default=nothing_in_use)

    def touch(self, hf_id: str) -> None:
        """Mark ``hf_id`` as used now; a read-only cache is simply not tracked."""
        folder = self.root / folder_name(hf_id)
        with contextlib.suppress(OSError):
            (folder / MARKER).touch()

    def last_used(self, folder: Path) -> float:
        marker = folder / MARKER
        try:
            return marker.stat().st_mtime
        except FileNotFoundError:
            return folder.stat().st_mtime

    def _pressure(self, needed_bytes: int) -> bool:
        usage = shutil.disk_usage(self.root)
        above = usage.total > 0 and 100.0 * usage.used / usage.total > self.threshold_percent
        return above or usage.free < needed_bytes

    def make_room(self, for_hf_id: str, needed_bytes: int = 0) -> list[str]:
        """Before fetching ``for_hf_id`` (``needed_bytes`` large): while the filesystem is above the
        threshold or has less free space than needed, delete the least recently used model folder
        that may go. Returns the evicted ids, oldest first. Stops when nothing else may go: the
        download then tries anyway and fails with the filesystem's own error if it must."""
        if not self.enabled or not self.root.is_dir():
            return []
        evicted: list[str] = []
        while self._pressure(needed_bytes):
            keep = {for_hf_id, *self.in_use(), *evicted}  # an undeletable folder is tried once
            candidates = [
                f
                for f in self.root.iterdir()
                if f.is_dir() and f.name.startswith(PREFIX) and hf_id_of(f) not in keep
            ]
            if not candidates:
                log.warning(
                    "disk cache %s is %.0f %% full (%s free, %s needed) and no cached model may be "
                    "evicted (none other, or all in use) before fetching %s",
                    self.root,
                    used_percent(self.root),
                    megabytes(shutil.disk_usage(self.root).free),
                    megabytes(needed_bytes),
                    for_hf_id,
                )
                break
            oldest = min(candidates, key=self.last_used)
            age = time.time() - self.last_used(oldest)
            shutil.rmtree(oldest, ignore_errors=True)
            evicted.append(hf_id_of(oldest))
            log.info(
                "disk cache %s over %.0f %%: evicted %s (unused for %.0f s) before fetching %s",
                self.root,
                self.threshold_percent,
                hf_id_of(oldest),
                age,
                for_hf_id,
            )
        return evicted

    def require_room(self, for_hf_id: str, needed_bytes: int) -> list[str]:
        """``make_room``, then ``DiskFull`` when the disk still has less than ``needed_bytes`` free: the
        fetch would only fill the disk and fail. Returns the evicted ids."""
        evicted = self.make_room(for_hf_id, needed_bytes)
        folder = self.root if self.root.is_dir() else mount_point(self.root)
        if shutil.disk_usage(folder).free >= needed_bytes:
            return evicted
        if evicted:
            after = f"after evicting {', '.join(evicted)}"
        else:
            after = "no cached model could be evicted" if self.enabled else "eviction is off"
        raise self.full(f"no room for {for_hf_id}", needed_bytes, after)

    def full(self, what: str, needed_bytes: int, after: str) -> DiskFull:
        """The ``DiskFull`` of a fetch into this cache: ``what`` went wrong, the room it needed, the
        disk's mount point and free space now, and ``after`` (what was done about it)."""
        folder = self.root if self.root.is_dir() else mount_point(self.root)
        usage = shutil.disk_usage(folder)
        return DiskFull(
            f"{what} in the local weight cache {self.root}: it needs {megabytes(needed_bytes)}, the "
            f"disk mounted at {mount_point(folder)} has {megabytes(usage.free)} free of "
            f"{megabytes(usage.total)} ({after})",
            folder,
            needed_bytes,
        )
