"""What passes between the engine and a family on each batch: the inputs ``prepare`` takes, the
``Prepared`` items it returns, and the ``BatchOutputs`` ``run`` returns (which postprocessing reads).

Data only, so ``sie.postprocess`` reads outputs without the adapter contract, and a family's helpers
build inputs without importing a model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sie.core.extraction import Extraction, ItemError


@dataclass(frozen=True, slots=True)
class ImageData:
    """An image as the client sent it (JPEG, PNG, ...): decoded by ``prepare``, on the CPU pool.
    ``text`` is the item's text beside it, for a family that reads both (``reads_image_text``): a
    chat VLM embeds an image and its caption as one input; every other family gets the image alone."""

    data: bytes
    format: str | None = None
    text: str | None = None


@dataclass(frozen=True, slots=True)
class AnnotatedText:
    """A text with its item's ``metadata``, for the families that read what a client says about the
    text (``reads_item_metadata``): GLiREL scores relations between the entities named there."""

    text: str
    metadata: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class MediaPair:
    """A (query, document) pair for a pair scorer that reads images (Qwen3-VL's reranker): each side
    is its item's text or its image (with the item's text beside it); text-only scorers keep getting
    plain ``(str, str)`` tuples."""

    query: str | ImageData
    document: str | ImageData


# What ``prepare`` takes: a text, a (query, document) pair for models that score pairs (a
# ``MediaPair`` for one that reads images), an image, or a text with its item's metadata.
ModelInput = str | tuple[str, str] | ImageData | AnnotatedText | MediaPair

_NO_IDS = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class Prepared:
    """One item ready for the device: token ids (a pair's two segments joined) and, for pairs, the
    segment of each token. ``payload`` holds what else the family's ``run`` needs (an image's pixels,
    GLiNER's words, an NLI model's hypothesis pairs), opaque to the engine. Its cost for batching is
    ``weight`` when the family sets one, else its token count.

    An item the family refuses on its own while the rest of the batch is fine (a document past
    GLiNER's window count) is ``refused``: it never reaches the device, an extraction answers it with
    its ``error`` and bills it nothing, and any other operation fails the request with it."""

    ids: np.ndarray = field(default_factory=lambda: _NO_IDS)
    type_ids: np.ndarray | None = None
    payload: Any = None
    weight: int | None = None
    error: ItemError | None = None
    # What the item bills (``usage``): ``tokens`` where its input tokens are not its cost (a padded
    # CLIP text reads its own ids, an image reads no text); ``content``, for a scored pair, the
    # caller's own text in it (query, document after truncation, instruction, each tokenized
    # alone), the rest being the family's template. None: the cost, or not told.
    tokens: int | None = None
    content: int | None = None

    @classmethod
    def refused(cls, error: ItemError) -> Prepared:
        return cls(error=error)

    @property
    def cost(self) -> int:
        return self.weight if self.weight is not None else len(self.ids)

    @property
    def input_tokens(self) -> int:
        return self.tokens if self.tokens is not None else self.cost


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
    extraction: Extraction | None = None


@dataclass
class BatchOutputs:
    """A batch's outputs, one row (or list entry) per item in batch order; float32 before postprocessing.

    Dense vectors and scores stay matrices so postprocessing runs once per batch, not per item."""

    dense: np.ndarray | None = None  # [items, dims]
    sparse: list[SparseVector] | None = None
    multivector: list[np.ndarray] | None = None
    scores: np.ndarray | None = None  # [items]
    extractions: list[Extraction] | None = None

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
            extractions=[e for p in parts for e in p.extractions or ()]
            if first.extractions is not None
            else None,
        )

    def take(self, rows: list[int]) -> BatchOutputs:
        """The outputs of ``rows`` only, in that order."""
        return BatchOutputs(
            dense=self.dense[rows] if self.dense is not None else None,
            sparse=[self.sparse[i] for i in rows] if self.sparse is not None else None,
            multivector=[self.multivector[i] for i in rows] if self.multivector is not None else None,
            scores=self.scores[rows] if self.scores is not None else None,
            extractions=[self.extractions[i] for i in rows] if self.extractions is not None else None,
        )

    def items(self, count: int) -> list[ItemOutputs]:
        return [
            ItemOutputs(
                dense=self.dense[i] if self.dense is not None else None,
                sparse=self.sparse[i] if self.sparse is not None else None,
                multivector=self.multivector[i] if self.multivector is not None else None,
                score=float(self.scores[i]) if self.scores is not None else None,
                extraction=self.extractions[i] if self.extractions is not None else None,
            )
            for i in range(count)
        ]
