"""Pooling of token states into one vector per sequence: the one implementation every family uses.

It works on the packed layout (``[tokens, hidden]`` plus ``PackedTokens``), which the packed forward
produces directly and the padded forwards (transformers, ONNX Runtime) reach with ``unpad``.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from sie.adapters.runtime.packing import PackedTokens
from sie.core.options import Pooling


def unpad(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """``[batch, longest, hidden]`` to the packed ``[tokens, hidden]`` (row-major, as ``PackedTokens``)."""
    return hidden[attention_mask.bool()]


def pool(hidden: torch.Tensor, tokens: PackedTokens, pooling: Pooling) -> torch.Tensor:
    """One float32 vector per sequence; mean pooling sums in float32 (half sums lose digits)."""
    if pooling is Pooling.CLS:
        return hidden.index_select(0, tokens.starts).float()
    if pooling is Pooling.LAST:
        return hidden.index_select(0, tokens.lasts).float()
    sums = hidden.new_zeros(tokens.lengths.shape[0], hidden.shape[1], dtype=torch.float32)
    sums.index_add_(0, tokens.segments, hidden.float())
    return sums / tokens.lengths.unsqueeze(1).to(torch.float32)


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
