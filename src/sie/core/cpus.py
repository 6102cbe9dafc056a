"""How many cores this process may really use.

``os.cpu_count()`` counts the machine's cores, not this process's: under ``taskset`` or a pod's CPU
limit it overstates them, and a forward pass split over more threads than cores stalls at every
barrier, and a cgroup-throttled pod stalls harder still. ``usable_cpus`` takes the smallest of the CPU affinity mask and the
cgroup's quota (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``), rounded up.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Final

CGROUP_ROOT: Final = Path("/sys/fs/cgroup")


def _quota_v2(root: Path) -> float | None:
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return None
    return None if quota == "max" else int(quota) / int(period)


def _quota_v1(root: Path) -> float | None:
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota <= 0 or period <= 0 else quota / period


def cgroup_cpus(root: Path = CGROUP_ROOT) -> float | None:
    """The cgroup's CPU quota in cores, None when it sets none."""
    quota = _quota_v2(root)
    return quota if quota is not None else _quota_v1(root)


def usable_cpus(root: Path = CGROUP_ROOT) -> int:
    """Cores this process can run on at once: the affinity mask, capped by the cgroup quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    quota = cgroup_cpus(root)
    if quota is not None:
        cores = min(cores, max(1, math.ceil(quota)))
    return max(1, cores)
