"""Engine outputs to wire results: the envelopes of each output type, ranked scores, extractions."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from sie.adapters.base import ItemOutputs
from sie.core.extraction import Extraction
from sie.core.options import Capability, OutputDType
from sie.postprocess.quantize import wire_dtype_name
from sie.wire.responses import (
    DenseVector,
    EncodeResult,
    ExtractResult,
    MultiVector,
    ScoreEntry,
    SparseVector,
)


def encode_result(
    item_id: str | None, outputs: ItemOutputs, dtype: OutputDType, dims: Mapping[Capability, int]
) -> EncodeResult:
    """``dims`` are the sizes before quantisation (a packed binary vector still reports its width)."""
    name = wire_dtype_name(dtype)
    result = EncodeResult(id=item_id)
    if outputs.dense is not None:
        result.dense = DenseVector(dims[Capability.DENSE], name, outputs.dense)
    if outputs.sparse is not None:
        values = outputs.sparse.values
        sparse_dtype = "float16" if values.dtype == np.float16 else "float32"
        result.sparse = SparseVector(
            dims.get(Capability.SPARSE), sparse_dtype, outputs.sparse.indices, values
        )
    if outputs.multivector is not None:
        vectors = outputs.multivector
        result.multivector = MultiVector(dims[Capability.MULTIVECTOR], int(vectors.shape[0]), name, vectors)
    return result


def ranked(item_ids: list[str], scores: np.ndarray) -> list[ScoreEntry]:
    """Best first; equal scores keep the request's order."""
    order = np.argsort(-scores, kind="stable")
    return [ScoreEntry(item_ids[i], float(scores[i]), rank) for rank, i in enumerate(order)]


def item_id(given: str | None, index: int) -> str:
    """Score and extract name an item without an id by its position, as the public server does."""
    return given if given is not None else f"item-{index}"


def extract_result(item_id: str, extraction: Extraction | None) -> ExtractResult:
    found = extraction or Extraction()
    return ExtractResult(
        item_id, found.entities, found.relations, found.classifications, found.objects, found.data
    )
