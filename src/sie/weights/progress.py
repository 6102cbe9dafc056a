"""Log lines while weights arrive, so a multi-gigabyte download is not a silent minute-long stall.

The progress is read from the destination folder itself (bytes and files on disk, partial files
included) by a thread that wakes every few seconds: it works the same for our own cluster copies and
for the Hub client's downloads, whose internals we do not hook.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 5.0


def folder_size(folder: Path) -> tuple[int, int]:
    """(bytes, files) under ``folder``; symlinks are not followed (the Hub's snapshots link to blobs)."""
    total = files = 0
    for root, _dirs, names in os.walk(folder):
        for name in names:
            try:
                stat = os.lstat(os.path.join(root, name))
            except FileNotFoundError:  # renamed by the writer between listing and stat
                continue
            if not os.path.islink(os.path.join(root, name)):
                total += stat.st_size
                files += 1
    return total, files


def megabytes(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


@contextmanager
def report_progress(
    what: str,
    folder: Path,
    total_bytes: int | None,
    total_files: int | None,
    interval_s: float = DEFAULT_INTERVAL_S,
) -> Iterator[None]:
    """Every ``interval_s`` while the block runs: ``<what>: 120.0 MB of 438.0 MB (27 %), 3 of 9 files``;
    one closing line with the time taken. Totals may be unknown (``None``)."""
    started = time.monotonic()
    start_bytes, start_files = folder_size(folder) if folder.exists() else (0, 0)
    stop = threading.Event()

    def line() -> str:
        done_bytes, done_files = folder_size(folder) if folder.exists() else (0, 0)
        done_bytes, done_files = done_bytes - start_bytes, done_files - start_files
        text = f"{what}: {megabytes(done_bytes)}"
        if total_bytes:
            text += f" of {megabytes(total_bytes)} ({100 * done_bytes // total_bytes} %)"
        text += f", {done_files}" + (f" of {total_files}" if total_files is not None else "") + " files"
        return text

    def watch() -> None:
        while not stop.wait(interval_s):
            log.info("%s after %.0f s", line(), time.monotonic() - started)

    watcher = threading.Thread(target=watch, name="weights-progress", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join()
    log.info("%s, done in %.1f s", line(), time.monotonic() - started)
