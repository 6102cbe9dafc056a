"""What a benchmark ran on, one description for every benchmark.

A CPU speed-up holds for a CPU class (AVX2-only, AVX512-BF16, AMX), not for every CPU, so each
result names the model and its widest matrix instructions; on a GPU it names the card and the
versions of what ran on it.
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

_REPO_ROOT = Path(__file__).resolve().parent.parent

# torch's capability keys, widest first, and how the docs name them.
_ISA: tuple[tuple[str, str], ...] = (
    ("amx_bf16", "AMX-BF16"),
    ("avx512_bf16", "AVX512-BF16"),
    ("avx512_f", "AVX512"),
    ("avx2", "AVX2"),
)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def widest_isa() -> str:
    import torch

    caps = torch.cpu.get_capabilities()
    return next((label for key, label in _ISA if caps.get(key)), "no AVX2")


def cpu_class() -> str:
    """The CPU as benchmarks name it: cores, model, and its widest matrix instructions."""
    return f"{os.cpu_count()}-core {cpu_model()}, {widest_isa()} (widest)"


def machine(device: str = "cpu") -> dict[str, Any]:
    """The machine and software versions; with a CUDA ``device``, the GPU too (an error if torch sees
    none, so a GPU run cannot pass silently as a CPU one)."""
    import sentence_transformers
    import torch
    import transformers

    import sie

    info: dict[str, Any] = {
        "device": device,
        "cores": os.cpu_count(),
        "cpu": cpu_model(),
        "cpu_isa": widest_isa(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "sentence_transformers": sentence_transformers.__version__,
        "sie_imported_from": str(Path(sie.__file__).parent),
    }
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise RuntimeError(f"--device {device}, but torch sees no CUDA device")
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, capability=f"{props.major}.{props.minor}")
        info["gpu_memory_mb"] = props.total_memory / 2**20
    else:
        info["gpu"] = "none"
    return info


def server_version(server_src: Path | None) -> str:
    """The commit our server runs from (``-dirty`` when src/ has uncommitted changes)."""
    if server_src is not None:
        return f"src from {server_src}"
    try:
        commit = subprocess.run(
            ["git", "-C", str(_REPO_ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(_REPO_ROOT), "status", "--porcelain", "--", "src"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("-dirty" if dirty else "")
