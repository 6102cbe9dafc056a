"""Server processes: start in their own process group, wait until ready, probe, always stop.

Every process started here is registered so that ``stop_all`` (called from ``finally`` and ``atexit``)
ends its whole group: first SIGTERM, then SIGKILL after a grace period.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Final

import httpx
import psutil

_RUNNING: list[ManagedProcess] = []


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ManagedProcess:
    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_path: Path) -> None:
        self.name, self.argv, self.env, self.log_path = name, argv, env, log_path
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        if self._popen is None:
            raise RuntimeError(f"{self.name} is not started")
        return self._popen.pid

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self._popen = subprocess.Popen(
                self.argv,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: stopped as a whole, not hit by the tty's ^C
            )
        _RUNNING.append(self)

    def exit_code(self) -> int | None:
        return None if self._popen is None else self._popen.poll()

    def stop(self, grace_s: float = 20.0) -> None:
        popen = self._popen
        if popen is None:
            return
        if self in _RUNNING:
            _RUNNING.remove(self)
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            if popen.poll() is not None and not _group_alive(popen.pid):
                return
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(popen.pid, sig)
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                if popen.poll() is not None and not _group_alive(popen.pid):
                    return
                time.sleep(0.1)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_all() -> None:
    for process in list(_RUNNING):
        process.stop()


atexit.register(stop_all)


def wait_ready(process: ManagedProcess, probe: Callable[[httpx.Client], bool], timeout_s: float) -> float:
    """Seconds until ``probe`` says yes; raises with the log tail if the process dies or time runs out."""
    start = time.monotonic()
    with httpx.Client(timeout=5.0) as client:
        while time.monotonic() - start < timeout_s:
            code = process.exit_code()
            if code is not None:
                raise RuntimeError(
                    f"{process.name} exited with {code} during startup; log {process.log_path}:\n"
                    + process.log_tail()
                )
            with contextlib.suppress(httpx.HTTPError):
                if probe(client):
                    return time.monotonic() - start
            time.sleep(0.25)
    raise RuntimeError(
        f"{process.name} not ready after {timeout_s:.0f} s; log {process.log_path}:\n" + process.log_tail()
    )


# --- probes of a running process tree -------------------------------------------------------------


def _tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def cpu_seconds(pid: int) -> float:
    """On-CPU seconds of the process, its live descendants and its reaped children.

    Each live process is read from its CPU-time clock (``clock_getcpuclockid``: the scheduler's
    nanoseconds, every thread's, the ended ones' too), not from the clock ticks of ``/proc/PID/stat``:
    a lone request costs about a millisecond, and 10 ms ticks over a window of a few hundred
    requests resolve it only to 25 us, the size of the differences the host-path targets are about.
    Reaped children are only known in ticks."""
    total = 0.0
    for index, proc in enumerate(_tree(pid)):
        with contextlib.suppress(psutil.Error):
            if index == 0:
                times = proc.cpu_times()
                total += times.children_user + times.children_system
            total += _process_cpu_s(proc)
    return total


_LIBC: Final = ctypes.CDLL(None, use_errno=True)


def _process_cpu_s(proc: psutil.Process) -> float:
    """The process's CPU-time clock, in seconds (user+system in ticks where there is none to read)."""
    clock = ctypes.c_int()
    if _LIBC.clock_getcpuclockid(proc.pid, ctypes.byref(clock)) == 0:
        with contextlib.suppress(OSError):  # it ended meanwhile
            return time.clock_gettime(clock.value)
    times = proc.cpu_times()
    return float(times.user + times.system)


def _status_kb(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def rss_mb(pid: int) -> float:
    """Current resident set (VmRSS) of the process tree, MB."""
    return sum(_status_kb(proc.pid, "VmRSS") for proc in _tree(pid)) / 1024


def peak_rss_mb(pid: int) -> float:
    """Peak resident set (VmHWM) of the process tree, MB (a sum of per-process peaks)."""
    return sum(_status_kb(proc.pid, "VmHWM") for proc in _tree(pid)) / 1024


def machine_busy_seconds() -> float:
    """Busy CPU seconds of the whole machine (all cores), from /proc/stat; hypervisor steal counts as
    busy, since a stolen core is as unavailable to the benchmark as one used by another process."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    idle = values[3] + values[4]  # idle + iowait
    return (sum(values) - idle) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


@contextlib.contextmanager
def pinned(cpus: Iterable[int] | None) -> Iterator[None]:
    """This process on ``cpus`` for the block (a load generator kept off a pinned server's cores, a
    floor measured on one core), then back where it was; None or no cores leaves it where it is."""
    wanted = set(cpus or ())
    if not wanted:
        yield
        return
    old = os.sched_getaffinity(0)
    os.sched_setaffinity(0, wanted)
    try:
        yield
    finally:
        os.sched_setaffinity(0, old)
