"""Pooling of token states into one vector, in NumPy for the ONNX path (torch pools on the device)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from sie.core.options import Pooling


def pool(hidden: np.ndarray, mask: np.ndarray, lengths: np.ndarray, pooling: Pooling) -> np.ndarray:
    if pooling is Pooling.CLS:
        return hidden[:, 0, :].astype(np.float32, copy=False)
    if pooling is Pooling.LAST:
        return hidden[np.arange(hidden.shape[0]), lengths - 1, :].astype(np.float32, copy=False)
    weights = mask.astype(np.float32)[:, :, None]
    summed = (hidden.astype(np.float32, copy=False) * weights).sum(axis=1)
    mean: np.ndarray = summed / np.clip(weights.sum(axis=1), 1e-9, None)
    return mean


def read_default_pooling(folder: Path) -> Pooling:
    """The pooling a sentence-transformers folder declares in ``1_Pooling/config.json`` (mean if none)."""
    config = folder / "1_Pooling" / "config.json"
    if not config.exists():
        return Pooling.MEAN
    modes = json.loads(config.read_text())
    if modes.get("pooling_mode_cls_token"):
        return Pooling.CLS
    if modes.get("pooling_mode_lasttoken"):
        return Pooling.LAST
    return Pooling.MEAN
