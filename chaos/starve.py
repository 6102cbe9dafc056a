"""A process starved of CPU: the "slow worker beside a fast one" fault of the chaos runs.

A cgroup v1 ``cpu`` group of its own (``/sys/fs/cgroup/cpu/sie-chaos-{owner pid}-{n}``) whose CFS
quota is ``share`` of one core per period: the process runs at full speed for ``share`` of each
100 ms period and is then throttled, which is what a worker on an oversubscribed host sees (not a
lower priority, which an idle machine would still serve at full speed). Writing the pid to
``cgroup.procs`` moves all of its threads, and threads or processes it starts later are born in the
group; its child processes alive at entry are moved too. On exit every process in the group goes
back to the group the starved process came from and the group is removed. Root only;
``Starved.sweep`` removes what a killed run left behind, and nothing outside those names is touched.

cgroup v2 (``cpu.max``) is not written here: this project's machines mount the v1 hierarchy
(``available`` says why it cannot run elsewhere).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import psutil

CPU_ROOT: Final = Path("/sys/fs/cgroup/cpu")
PERIOD_US: Final = 100_000
MIN_QUOTA_US: Final = 1_000  # the kernel refuses a smaller quota
_OWNED: Final = re.compile(r"^sie-chaos-(\d+)-\d+$")
_counter = itertools.count()


@dataclass(frozen=True)
class Throttling:
    """The group's ``cpu.stat``: periods that ran, periods it hit its quota in, and the time its
    processes were held back (seconds)."""

    periods: int
    throttled_periods: int
    throttled_s: float


class Starved:
    """One process (and its children) held to ``share`` of a core; ``set_share`` changes it live."""

    def __init__(self, pid: int, share: float, root: Path = CPU_ROOT) -> None:
        self.pid = pid
        self.group = root / f"sie-chaos-{os.getpid()}-{next(_counter)}"
        self._root = root
        self._home = root / _cpu_group(pid).lstrip("/")
        self._share = share
        _quota_us(share)  # a bad share fails before anything is made

    @property
    def share(self) -> float:
        return self._share

    def enter(self) -> None:
        self.group.mkdir()
        try:
            (self.group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            self.set_share(self._share)
            for pid in [self.pid, *_descendants(self.pid)]:
                _move(pid, self.group)
        except BaseException:
            self.leave()
            raise

    def set_share(self, share: float) -> None:
        (self.group / "cpu.cfs_quota_us").write_text(str(_quota_us(share)))
        self._share = share

    def throttling(self) -> Throttling:
        stat = dict(line.split() for line in (self.group / "cpu.stat").read_text().splitlines())
        return Throttling(
            int(stat["nr_periods"]), int(stat["nr_throttled"]), int(stat["throttled_time"]) / 1e9
        )

    def leave(self) -> None:
        """Everything in the group back home (the starved process's own group at entry; the root
        when that one is gone), then the group removed."""
        if not self.group.exists():
            return
        home = self._home if self._home.is_dir() else self._root
        _empty(self.group, home)


def _quota_us(share: float) -> int:
    cores = os.cpu_count() or 1
    if not 0 < share <= cores:
        raise ValueError(f"a CPU share is a fraction of one core in (0, {cores}], not {share}")
    return max(MIN_QUOTA_US, round(share * PERIOD_US))


def _cpu_group(pid: int) -> str:
    """The process's group in the v1 ``cpu`` hierarchy (``/`` when none is named)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return path
    return "/"


def _descendants(pid: int) -> list[int]:
    """The process's children, their children and so on, as they are now."""
    found: list[int] = []
    pending = [pid]
    while pending:
        parent = pending.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            with contextlib.suppress(OSError):
                children = [int(c) for c in (task / "children").read_text().split()]
                found += children
                pending += children
    return found


def _move(pid: int, group: Path) -> None:
    with contextlib.suppress(ProcessLookupError):  # gone meanwhile: nothing to move
        (group / "cgroup.procs").write_text(str(pid))


def _empty(group: Path, home: Path) -> None:
    """Move every process out of ``group`` to ``home`` and remove it; a process starting as the
    group empties is moved on the next round."""
    for _ in range(50):
        for pid in (group / "cgroup.procs").read_text().split():
            _move(int(pid), home)
        try:
            group.rmdir()
            return
        except OSError:  # EBUSY: a task is still on its way out
            time.sleep(0.01)
    raise RuntimeError(f"{group} would not empty: {(group / 'cgroup.procs').read_text().split()}")


@contextlib.contextmanager
def starved(pid: int, share: float, root: Path = CPU_ROOT) -> Iterator[Starved]:
    """``pid`` (with its threads and children) held to ``share`` of one core inside the block:
    ``starved(worker.pid, 0.1)`` leaves it a tenth of a core."""
    sweep(root)
    group = Starved(pid, share, root)
    group.enter()
    try:
        yield group
    finally:
        group.leave()


def sweep(root: Path = CPU_ROOT) -> None:
    """Remove the groups of runs whose process is gone (a SIGKILLed test), their processes back in
    the root group."""
    for group in root.glob("sie-chaos-*"):
        found = _OWNED.match(group.name)
        if found and group.is_dir() and not psutil.pid_exists(int(found.group(1))):
            _empty(group, root)


def available(root: Path = CPU_ROOT) -> str | None:
    """Why a process cannot be starved here (not root, no v1 ``cpu`` hierarchy), or None."""
    if os.geteuid() != 0:
        return "cgroup writes need root"
    if not (root / "cpu.cfs_quota_us").exists():
        return f"no cgroup v1 cpu hierarchy at {root} (cgroup v2's cpu.max is not supported)"
    probe = root / f"sie-chaos-{os.getpid()}-probe"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as exc:
        return f"cannot create a cpu cgroup under {root}: {exc}"
    return None
