"""MaxSim (late-interaction, ColBERT-style) scores computed on the client.

A caller that encoded its documents once with ``output_types=["multivector"]`` and keeps the token
vectors in its own store can rank them against a new query without sending the corpus back to a
server: ``maxsim(query_result["multivector"], stored_vectors)``. Same names, arguments, results and
errors as ``sie_sdk.scoring`` in the public ``sie-sdk``.

Scores are accumulated in float32 whatever the input dtype (float16 transport vectors included), so
a long query does not lose precision to half-precision sums. Documents are scored in small blocks:
several documents share one matrix product, which removes most of the per-document Python overhead
without ever copying a whole corpus (a float16 corpus would otherwise be duplicated at float32).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["maxsim", "maxsim_batch"]

# Floats a block may hold: its stacked document tokens plus their similarity matrix with the query
# tokens. 1 MiB stays in a core's cache, where small blocks measured faster than large ones.
_BLOCK_FLOATS = 1 << 18


def _as_multivector(value: object, *, label: str) -> NDArray[np.float32]:
    """One ``[num_tokens, dim]`` multivector as float32, or a ValueError naming the faulty argument.

    Vectors read back from a store are where shapes go wrong (a row stored flat, an empty result), and
    numpy's own matmul error would not say which argument or document is at fault.
    """
    array = np.asarray(value, dtype=np.float32)
    if array.ndim != 2:
        raise ValueError(
            f"{label} must be a 2-D [num_tokens, dim] array, got shape {array.shape}; wrap a single "
            "token vector as vector[None, :], and pass several documents as `documents`"
        )
    if array.shape[0] == 0:
        raise ValueError(f"{label} has no tokens (shape {array.shape}), so it has no MaxSim score")
    return array


def _check_dims(query_dims: Iterable[int], document: NDArray[np.float32], index: int) -> None:
    """Vectors of two different models cannot be compared; say so rather than fail inside matmul."""
    for dim in query_dims:
        if dim != document.shape[1]:
            raise ValueError(
                f"dim mismatch: query has dim {dim} but documents[{index}] has dim {document.shape[1]}; "
                "the stored document vectors must come from the model that encodes the query"
            )


def _starts(arrays: Sequence[NDArray[np.float32]]) -> NDArray[np.intp]:
    """Row offsets of each array in their concatenation: the segments ``reduceat`` reduces."""
    starts = np.zeros(len(arrays), dtype=np.intp)
    np.cumsum([a.shape[0] for a in arrays[:-1]], out=starts[1:])
    return starts


def _blocks(
    documents: Iterable[object], query_dims: Sequence[int], query_tokens: int
) -> Iterator[list[NDArray[np.float32]]]:
    """Checked float32 documents, grouped so that each group fits in ``_BLOCK_FLOATS``.

    Checking lazily, in document order, raises the same first error as scoring one by one would.
    """
    block: list[NDArray[np.float32]] = []
    used = 0
    for index, value in enumerate(documents):
        document = _as_multivector(value, label=f"documents[{index}]")
        _check_dims(query_dims, document, index)
        size = document.shape[0] * (document.shape[1] + query_tokens)
        if block and used + size > _BLOCK_FLOATS:
            yield block
            block, used = [], 0
        block.append(document)
        used += size
    if block:
        yield block


def _scores(queries: Sequence[NDArray[np.float32]], documents: Iterable[object]) -> NDArray[np.float32]:
    """The ``[len(queries), n_documents]`` MaxSim matrix: all query tokens meet a block in one matmul."""
    if not queries:
        # Nothing to score, but every document is still checked, as the public SDK does.
        count = sum(len(block) for block in _blocks(documents, (), 0))
        return np.zeros((0, count), dtype=np.float32)
    query_dims = list(dict.fromkeys(q.shape[1] for q in queries))
    query_tokens = sum(q.shape[0] for q in queries)
    stacked: NDArray[np.float32] | None = None
    query_starts = _starts(queries)
    columns: list[NDArray[np.float32]] = []
    for block in _blocks(documents, query_dims, query_tokens):
        if stacked is None:
            # Safe only now: the first document has shown that every query has its dim.
            stacked = queries[0] if len(queries) == 1 else np.concatenate(queries)
        tokens = block[0] if len(block) == 1 else np.concatenate(block)
        similarity = stacked @ tokens.T  # [query tokens, document tokens]
        best = np.maximum.reduceat(similarity, _starts(block), axis=1)  # best match per document
        columns.append(np.add.reduceat(best, query_starts, axis=0))  # summed over each query's tokens
    if not columns:
        return np.zeros((len(queries), 0), dtype=np.float32)
    return columns[0] if len(columns) == 1 else np.concatenate(columns, axis=1)


def maxsim(query: ArrayLike, documents: Iterable[ArrayLike] | NDArray[Any]) -> list[float]:
    """MaxSim of one query against each document, in document order (higher is more relevant).

    ``documents`` is a list of ``[num_tokens, dim]`` multivectors, a ``[n, num_tokens, dim]`` stack,
    or one 2-D multivector on its own (then one score comes back). Vectors are used as given: ColBERT
    outputs are already L2-normalised, so the dot product is the cosine.
    """
    docs: Iterable[object]
    if isinstance(documents, np.ndarray):
        docs = [documents] if documents.ndim == 2 else list(documents)
    else:
        docs = documents
    checked = _as_multivector(query, label="query")
    scores: list[float] = _scores([checked], docs)[0].tolist()
    return scores


def maxsim_batch(
    queries: Sequence[ArrayLike] | NDArray[Any], documents: Sequence[ArrayLike] | NDArray[Any]
) -> NDArray[np.float32]:
    """MaxSim of every query against every document: a float32 ``[len(queries), len(documents)]`` matrix.

    Cheaper than one ``maxsim`` per query, because each block of documents is converted once and
    meets all the queries' tokens in a single matrix product.
    """
    checked = [_as_multivector(q, label=f"queries[{i}]") for i, q in enumerate(queries)]
    return _scores(checked, documents)
