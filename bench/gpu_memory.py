"""GPU memory a server uses, read with ``nvidia-smi`` while it runs: right after preload (idle) and the
highest reading of a sampler that polls through the load cells (peak).

The server's own figure comes from ``--query-compute-apps`` (memory per process id), summed over its
process tree. In a container whose PID namespace differs from the driver's, those ids do not match
ours; then the reading is the whole GPU's used memory minus what was used before the server started
(this process's own CUDA context included in that baseline), and the result says which one it is.
Both include what PyTorch's caching allocator holds, which is what other tenants of the GPU lose.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
from dataclasses import dataclass
from typing import Final

import psutil

SMI_TIMEOUT_S: Final = 10.0
PER_PROCESS: Final = "per process (nvidia-smi compute apps)"
WHOLE_GPU: Final = "whole GPU minus before start"


def _smi(*query: str) -> list[str] | None:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        done = subprocess.run(
            ["nvidia-smi", *query, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=SMI_TIMEOUT_S,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def device_used_mb() -> float | None:
    """Used memory of GPU 0 in MiB, or None without nvidia-smi."""
    lines = _smi("--query-gpu=memory.used")
    try:
        return float(lines[0]) if lines else None
    except ValueError:
        return None


def _tree_pids(pid: int) -> set[int]:
    try:
        root = psutil.Process(pid)
        return {pid, *(child.pid for child in root.children(recursive=True))}
    except psutil.Error:
        return {pid}


def process_used_mb(pid: int) -> float | None:
    """MiB held by ``pid`` and its descendants per ``--query-compute-apps``; None if none is listed."""
    lines = _smi("--query-compute-apps=pid,used_memory")
    if lines is None:
        return None
    pids = _tree_pids(pid)
    total, seen = 0.0, False
    for line in lines:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and int(parts[0]) in pids:
            try:
                total += float(parts[1])
                seen = True
            except ValueError:
                continue
    return total if seen else None


@dataclass(frozen=True)
class Reading:
    mb: float
    how: str  # PER_PROCESS or WHOLE_GPU


def read(pid: int, baseline_mb: float | None) -> Reading | None:
    """The server's GPU memory now; None where nvidia-smi is missing (a CPU run)."""
    own = process_used_mb(pid)
    if own is not None:
        return Reading(own, PER_PROCESS)
    used = device_used_mb()
    if used is None or baseline_mb is None:
        return None
    return Reading(max(0.0, used - baseline_mb), WHOLE_GPU)


class PeakSampler:
    """Polls ``read`` on a thread of its own until stopped; ``peak`` is the highest reading."""

    def __init__(self, pid: int, baseline_mb: float | None, interval_s: float = 0.5) -> None:
        self._pid, self._baseline, self._interval = pid, baseline_mb, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="gpu-memory", daemon=True)
        self.peak: Reading | None = None

    def _poll(self) -> None:
        while not self._stop.is_set():
            reading = read(self._pid, self._baseline)
            if reading is not None and (self.peak is None or reading.mb > self.peak.mb):
                self.peak = reading
            self._stop.wait(self._interval)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
