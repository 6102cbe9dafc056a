"""``chaos.starve``: a real process (and its child) in a real cgroup v1 ``cpu`` group. Inside the
block it burns at most its share of a core, threads it starts later included; on exit it is back in
its own group and the group is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from chaos import starve

SHARE = 0.1

# Waits for a line on stdin, then starts two busy threads: threads born inside the group.
BURNER = textwrap.dedent(
    """
    import subprocess, sys, threading
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print(child.pid, flush=True)
    sys.stdin.readline()
    def burn():
        while True:
            pass
    for _ in range(2):
        threading.Thread(target=burn, daemon=True).start()
    print("burning", flush=True)
    sys.stdin.readline()
    """
)


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks of 10 ms


def _group_of(pid: int) -> str:
    return starve._cpu_group(pid)


@dataclass
class Burner:
    process: subprocess.Popen[str]
    child: int  # its child process, started before any group

    def go(self) -> None:
        """Start its busy threads."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()
        assert self.process.stdout.readline().strip() == "burning"


@pytest.fixture
def burner() -> Iterator[Burner]:
    why = starve.available()
    if why is not None:
        pytest.skip(why)
    process = subprocess.Popen(
        [sys.executable, "-c", BURNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    child = int(process.stdout.readline())
    try:
        yield Burner(process, child)
    finally:
        os.kill(child, signal.SIGKILL)
        process.kill()
        process.wait()


def test_a_starved_process_burns_its_share_and_is_set_free_after(burner: Burner) -> None:
    pid = burner.process.pid
    home = _group_of(pid)
    with starve.starved(pid, SHARE) as group:
        name = "/" + group.group.name
        assert _group_of(pid) == name and _group_of(burner.child) == name  # the child moved too
        assert (group.group / "cpu.cfs_quota_us").read_text().strip() == "10000"
        burner.go()
        before, started = _cpu_s(pid), time.monotonic()
        time.sleep(2)
        used, wall = _cpu_s(pid) - before, time.monotonic() - started
        throttling = group.throttling()
        # Two busy threads would take two cores; the quota allows a tenth of one (one period's
        # quota of slack at each end of the window, and the tick's rounding).
        assert used <= SHARE * wall + 0.05, (used, wall)
        assert throttling.throttled_periods > 0 and throttling.throttled_s > 0
        group.set_share(0.5)
        assert (group.group / "cpu.cfs_quota_us").read_text().strip() == "50000"
    assert _group_of(pid) == home and _group_of(burner.child) == home
    assert not group.group.exists()


def test_a_share_outside_the_machine_is_refused() -> None:
    with pytest.raises(ValueError, match="fraction of one core"):
        starve.Starved(1, 0)
    with pytest.raises(ValueError, match="fraction of one core"):
        starve.Starved(1, 1000)


def test_sweep_empties_and_removes_a_dead_runs_group(burner: Burner) -> None:
    """A run killed inside the block leaves its group; the next run's sweep sets its process free."""
    pid = burner.process.pid
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    left = starve.CPU_ROOT / f"sie-chaos-{int(dead.stdout)}-0"
    left.mkdir()
    (left / "cgroup.procs").write_text(str(pid))
    assert _group_of(pid) == "/" + left.name
    starve.sweep()
    assert not left.exists()
    assert _group_of(pid) == "/"  # the root: the group it came from is not known to a sweep
