"""The contract between the engine and a model family.

An adapter sees a padded ``TokenBatch`` and returns NumPy; it never sees a request, the web or the
queue. What it can produce is declared up front so the engine can reject a request before any work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from sie.core.options import AttentionBackend, ComputePrecision, Pooling


@dataclass(frozen=True)
class TokenBatch:
    """Right-padded token ids; ``lengths`` are the real lengths, used for pooling and cost."""

    input_ids: np.ndarray
    attention_mask: np.ndarray
    lengths: np.ndarray

    @classmethod
    def pad(cls, sequences: list[np.ndarray], pad_id: int) -> TokenBatch:
        lengths = np.fromiter((len(s) for s in sequences), dtype=np.int64, count=len(sequences))
        width = int(lengths.max()) if len(sequences) else 0
        ids = np.full((len(sequences), width), pad_id, dtype=np.int64)
        mask = np.zeros((len(sequences), width), dtype=np.int64)
        for row, seq in enumerate(sequences):
            ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        return cls(ids, mask, lengths)


@dataclass(frozen=True)
class LoadSpec:
    """Everything an adapter needs to load, resolved by the engine from YAML, settings and device."""

    weights: Path
    device: str
    precision: ComputePrecision
    max_seq_length: int | None
    loadtime: dict[str, Any] = field(default_factory=dict)
    threads: int | None = None
    tokenizer_weights: Path | None = None
    attention: AttentionBackend = AttentionBackend.AUTO


class DenseEncoder(Protocol):
    """A model that turns token batches into one vector per item."""

    dims: int
    default_pooling: Pooling
    # True when padding costs the encoder (almost) nothing because it packs real tokens itself: the
    # engine then sends a whole batch in one call instead of cutting it into length chunks.
    packs_tokens: bool

    def embed(self, batch: TokenBatch, pooling: Pooling) -> np.ndarray:
        """Pooled float32 vectors, shape ``[len(batch), dims]``; normalisation is the engine's job."""
        ...

    def close(self) -> None:
        """Free weights and device memory."""
        ...


class UnsupportedInput(ValueError):
    """An item lacks what the adapter needs (e.g. no text for a text model)."""
