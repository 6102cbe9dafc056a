"""Device detection and the compute precision actually used on it.

Precision fallbacks (documented in the README): CPU always computes in float32 (bf16/fp16 on CPU are
slower or less accurate on most CPUs until the performance work proves otherwise); CUDA honours
float16, and bfloat16 only on compute capability >= 8.0 (older GPUs fall back to float16); MPS
honours float16 and bfloat16.
"""

from __future__ import annotations

from sie.engine.model_config import ComputePrecision


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


def effective_precision(requested: ComputePrecision, device: str) -> ComputePrecision:
    if device.startswith("cpu"):
        return ComputePrecision.FLOAT32
    if device.startswith("cuda") and requested is ComputePrecision.BFLOAT16:
        import torch

        index = int(device.split(":", 1)[1]) if ":" in device else 0
        if torch.cuda.get_device_capability(index)[0] < 8:
            return ComputePrecision.FLOAT16
    return requested
