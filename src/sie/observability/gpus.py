"""Per-GPU figures for ``/ws/status``: CUDA devices through torch (utilisation through NVML when the
``nvidia-ml-py`` package is there), nothing on a machine without CUDA.

``gpu_type`` is the short name the public server routes by (``l4``, ``a100-80gb``, ``h100``...), so a
gateway matching ``machine_profile`` against it sees the same names from us.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Any, Final

log = logging.getLogger(__name__)

# Marketing names to routing names, tried in order on the lower-cased device name.
_TYPES: Final = (
    (re.compile(r"\ba100\b.*80\s*gb"), "a100-80gb"),
    (re.compile(r"\ba100\b"), "a100-40gb"),
    (re.compile(r"\bh100\b"), "h100"),
    (re.compile(r"\bh200\b"), "h200"),
    (re.compile(r"\ba10g\b"), "a10g"),
    (re.compile(r"\bl40s\b"), "l40s"),
    (re.compile(r"\bl4\b"), "l4"),
    (re.compile(r"\bt4\b"), "t4"),
    (re.compile(r"rtx\s*(\d{4})"), "rtx-{0}"),
)


def gpu_type(name: str) -> str:
    lowered = name.lower()
    for pattern, label in _TYPES:
        found = pattern.search(lowered)
        if found:
            return label.format(*found.groups())
    return "unknown"


def gpu_metrics(threshold_pct: float, gpu_type_override: str | None = None) -> list[dict[str, Any]]:
    """One entry per visible CUDA device; empty when torch is not imported or sees no CUDA device
    (the status stream must never be the first to initialise CUDA on a CPU server). A
    ``gpu_type_override`` (``SIE_GPU_TYPE``) is every device's ``gpu_type``."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return []
    gpus = []
    for index in range(torch.cuda.device_count()):
        name = torch.cuda.get_device_name(index)
        free, total = torch.cuda.mem_get_info(index)
        gpus.append(
            {
                "device": f"cuda:{index}",
                "name": name,
                "gpu_type": gpu_type_override or gpu_type(name),
                "utilization_pct": _utilization(torch, index),
                "memory_used_bytes": int(total - free),
                "memory_total_bytes": int(total),
                "memory_threshold_pct": float(threshold_pct),
            }
        )
    return gpus


def _utilization(torch: Any, index: int) -> int:
    try:
        return int(torch.cuda.utilization(index))
    except Exception:  # no NVML bindings, or the driver refuses: the figure is optional
        return 0
