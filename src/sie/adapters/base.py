"""The contract between the engine and a model family.

An adapter does two things, on two threads. ``prepare`` turns texts (or query-document pairs) into
``Prepared`` items on the CPU pool: tokenization, plus whatever the family adds (ColBERT's markers and
query expansion, a pair's segments). ``run`` takes a batch of prepared items on the device thread and
returns every output the ``Forward`` asks for, as NumPy, in one ``BatchOutputs``. One forward may
yield several outputs (BGE-M3 gives dense, sparse and multivector from one pass). What an adapter can
produce is declared up front (``capabilities``), so the engine refuses a request before any work.
Output dtypes, normalisation and MUVERA are the engine's postprocessing, never the adapter's. An
adapter never sees a request, HTTP or the queue.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from sie.adapters.tokenizer import TextTokenizer
from sie.core.options import AttentionBackend, Capability, ComputePrecision, Pooling

# What ``prepare`` takes: a text, or a (query, document) pair for models that score pairs.
ModelInput = str | tuple[str, str]


@dataclass(frozen=True, slots=True)
class Prepared:
    """One item ready for the device: token ids (a pair's two segments joined) and, for pairs, the
    segment of each token. Its cost for batching is its token count."""

    ids: np.ndarray
    type_ids: np.ndarray | None = None

    @property
    def cost(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class TokenBatch:
    """Right-padded ids for the adapters whose forward takes a padded batch (``lengths``: real ones)."""

    input_ids: np.ndarray
    attention_mask: np.ndarray
    token_type_ids: np.ndarray
    lengths: np.ndarray

    @classmethod
    def pad(cls, batch: Sequence[Prepared], pad_id: int) -> TokenBatch:
        lengths = np.fromiter((item.cost for item in batch), dtype=np.int64, count=len(batch))
        width = int(lengths.max(initial=0))
        ids = np.full((len(batch), width), pad_id, dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int64)
        types = np.zeros((len(batch), width), dtype=np.int64)
        for row, item in enumerate(batch):
            ids[row, : item.cost] = item.ids
            mask[row, : item.cost] = 1
            if item.type_ids is not None:
                types[row, : item.cost] = item.type_ids
        return cls(ids, mask, types, lengths)


@dataclass(frozen=True)
class Forward:
    """What one forward must produce; items are batched together only when this is equal."""

    outputs: frozenset[Capability]
    pooling: Pooling | None = None  # dense pooling; None means the model's own
    is_query: bool = False


@dataclass(frozen=True, slots=True)
class SparseVector:
    indices: np.ndarray  # int32 token ids, ascending
    values: np.ndarray  # float32 weights, all > 0


@dataclass(frozen=True, slots=True)
class ItemOutputs:
    dense: np.ndarray | None = None
    sparse: SparseVector | None = None
    multivector: np.ndarray | None = None  # [tokens, token_dims]
    score: float | None = None


@dataclass
class BatchOutputs:
    """A batch's outputs, one row (or list entry) per item in batch order; float32 before postprocessing.

    Dense vectors and scores stay matrices so postprocessing runs once per batch, not per item."""

    dense: np.ndarray | None = None  # [items, dims]
    sparse: list[SparseVector] | None = None
    multivector: list[np.ndarray] | None = None
    scores: np.ndarray | None = None  # [items]

    @classmethod
    def concat(cls, parts: Sequence[BatchOutputs]) -> BatchOutputs:
        if len(parts) == 1:
            return parts[0]
        first = parts[0]
        return cls(
            dense=np.concatenate([p.dense for p in parts if p.dense is not None])
            if first.dense is not None
            else None,
            sparse=[v for p in parts for v in p.sparse or ()] if first.sparse is not None else None,
            multivector=[m for p in parts for m in p.multivector or ()]
            if first.multivector is not None
            else None,
            scores=np.concatenate([p.scores for p in parts if p.scores is not None])
            if first.scores is not None
            else None,
        )

    def take(self, rows: list[int]) -> BatchOutputs:
        """The outputs of ``rows`` only, in that order."""
        return BatchOutputs(
            dense=self.dense[rows] if self.dense is not None else None,
            sparse=[self.sparse[i] for i in rows] if self.sparse is not None else None,
            multivector=[self.multivector[i] for i in rows] if self.multivector is not None else None,
            scores=self.scores[rows] if self.scores is not None else None,
        )

    def items(self, count: int) -> list[ItemOutputs]:
        return [
            ItemOutputs(
                dense=self.dense[i] if self.dense is not None else None,
                sparse=self.sparse[i] if self.sparse is not None else None,
                multivector=self.multivector[i] if self.multivector is not None else None,
                score=float(self.scores[i]) if self.scores is not None else None,
            )
            for i in range(count)
        ]


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

    def tokenizer(self) -> TextTokenizer:
        return TextTokenizer.from_folder(self.tokenizer_weights or self.weights, self.max_seq_length)


class Adapter(Protocol):
    """A loaded model of one family; see the module docstring for the two halves of the contract."""

    capabilities: frozenset[Capability]
    family: str  # named in input errors ("SentenceTransformer adapters requires text input")
    # Output sizes: dense dims, sparse vocabulary, multivector token dims.
    dims: Mapping[Capability, int]
    default_pooling: Pooling
    tokenizer: TextTokenizer
    # True when padding costs the adapter (almost) nothing because it packs real tokens itself: the
    # engine then sends a whole batch in one call instead of cutting it into length chunks.
    packs_tokens: bool

    def prepare(self, inputs: Sequence[ModelInput], is_query: bool) -> list[Prepared]:
        """CPU pool: tokenize; raises ``UnsupportedInput`` for an input the family cannot take."""
        ...

    def run(self, batch: Sequence[Prepared], forward: Forward) -> BatchOutputs:
        """Device thread: one batch through the model, every output in ``forward.outputs``."""
        ...

    def close(self) -> None:
        """Free weights and device memory."""
        ...


class UnsupportedInput(ValueError):
    """An item lacks what the adapter needs (e.g. a pair sent to a model that embeds single texts)."""


def texts_only(inputs: Sequence[ModelInput], family: str) -> list[str]:
    """The inputs of an adapter that embeds single texts; a pair is refused with the family's name."""
    if any(not isinstance(one, str) for one in inputs):
        raise UnsupportedInput(f"{family} models embed single texts, not query-document pairs")
    return [one for one in inputs if isinstance(one, str)]
