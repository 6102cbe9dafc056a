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
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

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
                    "disk cache %s is %.0f %% full and every cached model is in use; fetching %s anyway",
                    self.root,
                    used_percent(self.root),
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
