"""Output dtypes, applied per row exactly as the public SIE does so stored vectors stay comparable.

- ``float16``: a cast.
- ``int8``: symmetric per row, ``round(x / max|x| * 127)``.
- ``uint8``: per-row min-max to 0..255; a constant row maps to 128.
- ``binary``/``ubinary``: sign bit (x > 0) packed 8 per byte; ``dims`` keeps the original width.
"""

from __future__ import annotations

import numpy as np

from sie.core.options import OutputDType


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    normalized: np.ndarray = vectors / np.clip(norms, 1e-12, None)
    return normalized


def quantize(vectors: np.ndarray, dtype: OutputDType) -> np.ndarray:
    """``vectors`` is float32 with rows on the last axis; returns the wire array for ``dtype``."""
    if dtype is OutputDType.FLOAT32:
        return vectors.astype(np.float32, copy=False)
    if dtype is OutputDType.FLOAT16:
        return vectors.astype(np.float16)
    if dtype is OutputDType.INT8:
        scale = np.abs(vectors).max(axis=-1, keepdims=True)
        scaled = np.divide(vectors, scale, out=np.zeros_like(vectors), where=scale > 0) * 127.0
        int8: np.ndarray = np.clip(np.round(scaled), -127, 127).astype(np.int8)
        return int8
    if dtype is OutputDType.UINT8:
        low = vectors.min(axis=-1, keepdims=True)
        span = vectors.max(axis=-1, keepdims=True) - low
        scaled = np.divide(vectors - low, span, out=np.full_like(vectors, 128.0 / 255.0), where=span > 0)
        uint8: np.ndarray = np.clip(np.round(scaled * 255.0), 0, 255).astype(np.uint8)
        return uint8
    return np.packbits(vectors > 0, axis=-1)


def wire_dtype_name(dtype: OutputDType) -> str:
    """The ``dtype`` string the response carries (``ubinary`` answers as ``binary``, like the public server)."""
    return "binary" if dtype in (OutputDType.BINARY, OutputDType.UBINARY) else dtype.value
