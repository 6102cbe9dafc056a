"""A batch's real tokens packed into one ``[tokens]`` order, and the one host-to-device copy they take.

Every torch family reads token states in this layout (the packed BERT forward produces it, the padded
forward is unpadded into it), pooling reads it, and the ONNX encoder pools with it too; so it lives
apart from any one forward, and importing it loads no kernels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from sie.adapters.batch import Prepared


@dataclass(frozen=True)
class PackedTokens:
    """A batch's real tokens, concatenated, and where each sequence sits in that ``[tokens]`` order.

    Every index tensor comes out of one int32 host buffer moved to the device in one copy (pinned and
    asynchronous on CUDA): on a GPU each small transfer is a synchronising call of its own, and the
    forward of a small model is launch-bound already. Pooling and varlen attention read these on the
    device, so nothing in the forward waits for the GPU until the pooled vectors come back.
    """

    ids: torch.Tensor  # [tokens]
    types: torch.Tensor  # [tokens], segment of a pair (0 for single texts)
    positions: torch.Tensor  # [tokens], position id of each token in its sequence (from ``first_position``)
    segments: torch.Tensor  # [tokens], the sequence each token belongs to (mean pooling)
    cu_seqlens: torch.Tensor  # [batch + 1], first token of each sequence, then the total (varlen)
    lasts: torch.Tensor  # [batch], last token of each sequence (last-token pooling)
    lengths: torch.Tensor  # [batch]
    host_lengths: np.ndarray  # [batch], the same on the host (bucket layout)
    longest: int  # the longest sequence (varlen takes it from the host, once per forward)

    @property
    def starts(self) -> torch.Tensor:
        return self.cu_seqlens[:-1]

    def per_item(self, rows: np.ndarray) -> list[np.ndarray]:
        """Rows in packed token order (one per token, on the host) cut back into one array per item."""
        return np.split(rows, np.cumsum(self.host_lengths)[:-1])

    @classmethod
    def of(cls, batch: Sequence[Prepared], device: torch.device, first_position: int = 0) -> PackedTokens:
        """Straight from the prepared items: no padded intermediate. ``first_position`` is the position
        id of a sequence's first token (``PackedBert.first_position``)."""
        lengths = np.fromiter((item.cost for item in batch), dtype=np.int64, count=len(batch))
        count, tokens = len(lengths), int(lengths.sum())
        host = np.empty(4 * tokens + 3 * count + 1, dtype=np.int32)
        ids, types, positions, segments, cu_seqlens, lasts, lengths_out = np.split(
            host, np.cumsum([tokens, tokens, tokens, tokens, count + 1, count])
        )
        if count:
            ids[:] = np.concatenate([item.ids for item in batch])
            types[:] = np.concatenate(
                [item.type_ids if item.type_ids is not None else np.zeros(item.cost) for item in batch]
            )
        segments[:] = np.repeat(np.arange(count), lengths)
        cu_seqlens[0] = 0
        np.cumsum(lengths, out=cu_seqlens[1:])
        positions[:] = np.arange(first_position, first_position + tokens) - np.repeat(
            cu_seqlens[:-1], lengths
        )
        lasts[:] = cu_seqlens[1:] - 1
        lengths_out[:] = lengths
        ids_t, types_t, positions_t, segments_t, cu_t, lasts_t, lengths_t = torch.split(
            host_to_device(host, device), [tokens, tokens, tokens, tokens, count + 1, count, count]
        )
        longest = int(lengths.max(initial=0))
        return cls(ids_t, types_t, positions_t, segments_t, cu_t, lasts_t, lengths_t, lengths, longest)


def host_to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """One host-to-device copy; from pinned memory and without waiting on CUDA (the caching host
    allocator keeps the pinned block until the copy has run)."""
    tensor = torch.from_numpy(np.ascontiguousarray(array))
    if device.type == "cpu":
        return tensor
    if device.type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)
