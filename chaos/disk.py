"""A folder on a small disk of its own: the "worker's weight-cache disk is full" fault of the chaos runs.

``full_disk`` mounts a tmpfs of ``size_bytes`` over a folder (root only), so a worker whose
``SIE_LOCAL_CACHE`` is that folder meets the kernel's own ENOSPC when a copy of weights does not fit,
exactly as on a real disk: no test double stands in for the filesystem. ``inodes`` caps the files it
may hold too (ENOSPC again, with bytes to spare: the way to make a copy fail half way, after the free
space check passed). ``resize`` grows (or shrinks) it in place, which is "the operator freed space":
what is on it stays. The mount hides whatever the folder held and shows it again when it is unmounted.

A worker in a network namespace (``chaos.hosts``) sees the mount: ``ip netns exec`` leaves the
machine's mounts visible (it only remounts ``/sys``); mount it before the worker starts. Each mount's
source is named ``sie-chaos-{owner pid}-{n}`` in ``/proc/mounts``, so ``sweep`` unmounts what a killed
run left behind, and nothing outside those names is touched.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import psutil

PAGE: Final = 4096  # tmpfs sizes are whole pages
_OWNED: Final = re.compile(r"^sie-chaos-(\d+)-\d+$")
_counter = itertools.count()


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")


def _options(size_bytes: int, inodes: int | None) -> str:
    if size_bytes < PAGE:
        raise ValueError(f"a disk of {size_bytes} bytes is under one page ({PAGE} bytes)")
    if inodes is not None and inodes < 1:
        raise ValueError(f"a disk holds at least one file, not {inodes}")
    return f"size={size_bytes}" + (f",nr_inodes={inodes}" if inodes is not None else "")


@dataclass(frozen=True)
class SmallDisk:
    """The mounted folder: how full it is, and room to be made on it."""

    folder: Path
    source: str  # the mount's name in /proc/mounts

    def free_bytes(self) -> int:
        return shutil.disk_usage(self.folder).free

    def resize(self, size_bytes: int, inodes: int | None = None) -> None:
        """The disk made ``size_bytes`` large in place (what it holds stays): room freed, or taken.
        Shrinking below what it holds is refused by the kernel."""
        _run("mount", "-o", f"remount,{_options(size_bytes, inodes)}", str(self.folder))

    def unmount(self) -> None:
        """Gone, with everything written on it; a process still inside the folder gets it lazily
        detached (it keeps its open files, the folder shows its old content at once)."""
        if not _mounted(self.source, self.folder):
            return
        done = subprocess.run(["umount", str(self.folder)], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            _run("umount", "--lazy", str(self.folder))


@contextlib.contextmanager
def full_disk(folder: Path, size_bytes: int, inodes: int | None = None) -> Iterator[SmallDisk]:
    """``folder`` (made if absent) on a tmpfs of ``size_bytes`` (rounded up to whole pages by the
    kernel) and at most ``inodes`` files and folders, unmounted on exit."""
    options = _options(size_bytes, inodes)
    folder.mkdir(parents=True, exist_ok=True)
    disk = SmallDisk(folder.resolve(), f"sie-chaos-{os.getpid()}-{next(_counter)}")
    _run("mount", "-t", "tmpfs", "-o", options, disk.source, str(disk.folder))
    try:
        yield disk
    finally:
        disk.unmount()


def _mounts() -> list[tuple[str, Path]]:
    """(source, mount point) of every mount, as ``/proc/mounts`` lists them (octal escapes undone)."""
    found: list[tuple[str, Path]] = []
    for line in Path("/proc/mounts").read_text().splitlines():
        source, point = line.split()[:2]
        found.append((source, Path(point.encode().decode("unicode_escape"))))
    return found


def _mounted(source: str, folder: Path) -> bool:
    return (source, folder) in _mounts()


def sweep() -> list[Path]:
    """Unmount the small disks of runs that are gone (their owner pid is dead); the folders freed."""
    freed: list[Path] = []
    for source, point in reversed(_mounts()):  # the newest first: one may sit on another
        owner = _OWNED.match(source)
        if owner is not None and not psutil.pid_exists(int(owner.group(1))):
            SmallDisk(point, source).unmount()
            freed.append(point)
    return freed
