"""How full the device is, and how much of it a model holds: what eviction decisions read.

There is no static budget per model: a device's gauge reads what is used now (CUDA: the driver's free
and total memory; MPS: memory allocated by Metal against the system's; CPU: the system's memory, since
a CPU model lives in RAM shared with everything else), and the engine evicts least recently used
models while it is above ``SIE_MEMORY_PRESSURE_THRESHOLD_PERCENT``. ``SIE_MEMORY_LIMIT_BYTES`` (ours,
not the public server's) replaces the gauge with a budget for model weights on this device: usage is
the loaded models' bytes against it, which a host shared with other services (or a test) can rely on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import psutil
import torch


class MemoryGauge(Protocol):
    def used_percent(self) -> float: ...

    def describe(self) -> str: ...


@dataclass(frozen=True)
class CudaGauge:
    device: torch.device

    def used_percent(self) -> float:
        free, total = torch.cuda.mem_get_info(self.device)
        return 100.0 * (total - free) / total

    def describe(self) -> str:
        return f"{self.device} memory"


class MpsGauge:
    def used_percent(self) -> float:
        return 100.0 * torch.mps.current_allocated_memory() / psutil.virtual_memory().total

    def describe(self) -> str:
        return "MPS allocated memory"


class SystemGauge:
    def used_percent(self) -> float:
        return float(psutil.virtual_memory().percent)

    def describe(self) -> str:
        return "system memory"


@dataclass(frozen=True)
class BudgetGauge:
    """The loaded models' bytes against a fixed budget (``SIE_MEMORY_LIMIT_BYTES``)."""

    limit_bytes: int
    loaded_bytes: Callable[[], int]

    def used_percent(self) -> float:
        return 100.0 * self.loaded_bytes() / self.limit_bytes

    def describe(self) -> str:
        return f"model memory of a {self.limit_bytes}-byte budget"


def gauge_for(device: str, limit_bytes: int | None, loaded_bytes: Callable[[], int]) -> MemoryGauge:
    if limit_bytes is not None:
        return BudgetGauge(limit_bytes, loaded_bytes)
    if device.startswith("cuda"):
        return CudaGauge(torch.device(device))
    if device.startswith("mps"):
        return MpsGauge()
    return SystemGauge()


def model_bytes(adapter: Any, weights: Path | None = None) -> int:
    """The bytes a loaded adapter holds: every tensor of the torch modules it references (each storage
    counted once, shared and tied weights included once), or, when it holds none (ONNX Runtime), the
    size of its weight files."""
    seen: set[int] = set()
    total = 0
    for tensor in _tensors(adapter, depth=4, visited=set()):
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key and key not in seen:
            seen.add(key)
            total += storage.nbytes()
    if total == 0 and weights is not None:
        files = [weights] if weights.is_file() else weights.rglob("*")
        total = sum(f.stat().st_size for f in files if f.is_file() and f.suffix in {".onnx", ".data", ".bin"})
    return total


def _tensors(value: Any, depth: int, visited: set[int]) -> Iterable[torch.Tensor]:
    if id(value) in visited or depth < 0:
        return
    visited.add(id(value))
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, torch.nn.Module):
        yield from value.parameters()
        yield from value.buffers()
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item, depth - 1, visited)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _tensors(item, depth - 1, visited)
    elif hasattr(value, "__dict__") and not isinstance(value, type):
        for item in vars(value).values():
            yield from _tensors(item, depth - 1, visited)
    elif hasattr(value, "__slots__"):
        for name in value.__slots__:
            yield from _tensors(getattr(value, name, None), depth - 1, visited)
