"""Device detection and the compute precision that actually runs on it.

Per-device policy (documented in the README):

- **CPU**: ``bfloat16`` and ``float16`` both run as **bfloat16** when the CPU multiplies bf16 in
  hardware (AMX-BF16 or AVX512-BF16): several times faster than float32 at cosine >= 0.995 to float32
  with unchanged top-10 retrieval (see docs/benchmarks.md). Without such hardware they run as float32,
  since emulated half precision is slower than float32. ``float32`` always runs as float32.
- **CUDA**: float16 as asked; bfloat16 only on compute capability >= 8.0 (older GPUs fall back to
  float16); float32 as asked.
- **MPS**: as asked.
"""

from __future__ import annotations

from functools import cache

from sie.core.options import ComputePrecision


def detect_device(requested: str) -> str:
    """``auto`` picks cuda, then mps, then cpu; explicit names (``cuda:1``) pass through."""
    if requested != "auto":
        return requested
    try:
        import torch
    except ImportError:
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    if torch.backends.mps.is_available():
        return "mps"
    return "cpu"


@cache
def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (AMX-BF16 or AVX512-BF16)."""
    try:
        import torch

        capabilities = torch.cpu.get_capabilities()
        return bool(capabilities.get("amx_bf16") or capabilities.get("avx512_bf16"))
    except (ImportError, AttributeError):
        try:
            with open("/proc/cpuinfo", encoding="ascii", errors="ignore") as info:
                flags = info.read()
        except OSError:
            return False
        return "amx_bf16" in flags or "avx512_bf16" in flags


def effective_precision(
    requested: ComputePrecision, device: str, *, cpu_bf16: bool | None = None
) -> ComputePrecision:
    if device.startswith("cpu"):
        if requested is ComputePrecision.FLOAT32:
            return requested
        hardware_bf16 = cpu_has_bf16() if cpu_bf16 is None else cpu_bf16
        return ComputePrecision.BFLOAT16 if hardware_bf16 else ComputePrecision.FLOAT32
    if device.startswith("cuda") and requested is ComputePrecision.BFLOAT16:
        import torch

        index = int(device.split(":", 1)[1]) if ":" in device else 0
        if torch.cuda.get_device_capability(index)[0] < 8:
            return ComputePrecision.FLOAT16
    return requested
