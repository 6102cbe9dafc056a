"""How many cores this process may really use, and OpenMP threads that sleep instead of spinning.

``os.cpu_count()`` counts the machine's cores, not this process's: under ``taskset`` or a pod's CPU
limit it overstates them, and a forward pass split over more threads than cores stalls at every
barrier (measured: a server pinned to one core of two ran its 32-item requests 1.4x slower per item
with two threads than with one). ``usable_cpus`` takes the smallest of the CPU affinity mask and the
cgroup's quota (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``), rounded up.

GNU OpenMP (PyTorch's CPU build) keeps its worker threads spinning for a while after every parallel
region so that the next one starts sooner. Between the small batches of a serving process that is
waste: a lone query on a near-free model cost 5.5 ms of CPU on two cores, 4.6 ms of it one OpenMP
thread spinning (bench/host_path.py, docs/benchmarks.md "The host path"). ``quiet_openmp`` asks for
passive waiting, which only takes effect before the OpenMP runtime loads (before ``import torch``),
and leaves a user's own ``OMP_WAIT_POLICY`` alone.
"""

from __future__ import annotations

import math
import os
from collections.abc import MutableMapping
from pathlib import Path
from typing import Final

CGROUP_ROOT: Final = Path("/sys/fs/cgroup")
WAIT_POLICY: Final = "OMP_WAIT_POLICY"


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


def quiet_openmp(environ: MutableMapping[str, str] = os.environ) -> None:
    """Passive OpenMP waiting unless the user chose a policy; call before torch is imported."""
    environ.setdefault(WAIT_POLICY, "PASSIVE")
