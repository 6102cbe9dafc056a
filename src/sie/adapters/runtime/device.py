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


def resolve_device(device: str, devices: list[str]) -> str:
    """The one device this server runs on, from ``SIE_DEVICE`` and ``SIE_DEVICES``, checked to exist.

    ``SIE_DEVICES`` names the devices the server may use, as the public server's list does; ours
    places every model on one device per process (one device thread, see ``engine.registry``), so
    the list holds one device, or the start is refused with how to use several. Its family must be
    ``SIE_DEVICE``'s (``auto`` and ``cpu`` adopt the list's, as the public server's ``cpu`` default
    does). A device that does not exist here (``cuda:1`` on a one-GPU or CPU machine) refuses the
    start instead of failing every model load later."""
    listed = list(dict.fromkeys(d.strip() for d in devices if d.strip()))
    if not listed:
        chosen = detect_device(device)
        _check_exists(chosen, "SIE_DEVICE")
        return chosen
    families = sorted({_family(d) for d in listed})
    configured = _family(device)
    if len(families) != 1:
        raise ValueError(f"SIE_DEVICES mixes device families ({', '.join(families)}); name devices of one")
    if configured not in ("auto", "cpu", families[0]):
        raise ValueError(f"SIE_DEVICE family '{configured}' must match SIE_DEVICES family '{families[0]}'")
    if len(listed) > 1:
        raise ValueError(
            f"SIE_DEVICES names {len(listed)} devices ({', '.join(listed)}); this server runs its models on "
            "one device per process: start one server per device (SIE_DEVICE or SIE_DEVICES=cuda:0, "
            "cuda:1, ...)"
        )
    _check_exists(listed[0], "SIE_DEVICES")
    return listed[0]


def _family(device: str) -> str:
    return device.strip().split(":", 1)[0].lower()


def _check_exists(device: str, variable: str) -> None:
    family, _, index = device.strip().lower().partition(":")
    if family not in ("cpu", "cuda", "mps") or (index and not index.isdigit()):
        raise ValueError(f"{variable}: '{device}' is not a device (cpu, cuda, cuda:N or mps)")
    number = int(index) if index else 0
    present = _present(family)
    if number >= present:
        where = f"{present} {family} device(s)" if present else f"no {family} device"
        raise ValueError(f"{variable}: device '{device}' does not exist here ({where})")


def _present(family: str) -> int:
    """How many devices of ``family`` this machine has (one CPU: ``cpu:0`` is the only CPU device)."""
    if family == "cpu":
        return 1
    try:
        import torch
    except ImportError:
        return 0
    if family == "cuda":
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    return 1 if torch.backends.mps.is_available() else 0
