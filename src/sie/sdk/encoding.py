"""Encode results as plain Python lists and dicts, the form vector stores and frameworks accept.

The clients hand out numpy arrays (cheap to compute with) while LangChain, LlamaIndex, Haystack,
Chroma and most database drivers want ``list[float]`` and JSON-like dicts. These helpers do that
conversion in one place, with the same names, arguments and results as ``sie_sdk.encoding`` in the
public ``sie-sdk``. They read a result either as a dict (what the clients return) or as an object
with attributes (a framework's own wrapper), and ``.tolist()`` turns every numpy value into a Python
``int`` or ``float`` whatever the wire dtype (float16, int8, uint8, binary).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "SparseVector",
    "dense_embedding",
    "multivector_embedding",
    "normalize_sparse_vector",
    "sparse_embedding",
    "sparse_embedding_dict",
]

SparseVector = dict[str, list[Any]]
"""A sparse vector as ``{"indices": list[int], "values": list[float]}``."""


def _field(container: Any, name: str) -> Any:
    """``container[name]`` for a dict, its attribute for anything else; ``None`` when absent."""
    return container.get(name) if isinstance(container, dict) else getattr(container, name, None)


def _to_list(values: Any) -> Any:
    """numpy arrays through ``.tolist()`` (Python scalars, not numpy ones); other iterables as lists."""
    return values.tolist() if hasattr(values, "tolist") else list(values)


def dense_embedding(result: Any, *, strict: bool = True) -> list[float]:
    """The result's dense vector as a list.

    A result without one is a ValueError by default, since it usually means the wrong
    ``output_types`` were asked for; ``strict=False`` returns ``[]`` for callers that mix outputs.
    """
    dense = _field(result, "dense")
    if dense is None:
        if strict:
            raise ValueError("Encode result missing dense embedding")
        return []
    vector: list[float] = _to_list(dense)
    return vector


def sparse_embedding(result: Any) -> SparseVector:
    """The result's sparse vector as ``{"indices": [...], "values": [...]}``.

    A missing sparse output, or a missing half of one, reads as empty lists so that documents
    without sparse weights can still be indexed.
    """
    sparse = _field(result, "sparse")
    if sparse is None:
        return {"indices": [], "values": []}
    indices, values = _field(sparse, "indices"), _field(sparse, "values")
    return {
        "indices": _to_list(indices if indices is not None else []),
        "values": _to_list(values if values is not None else []),
    }


def sparse_embedding_dict(result: Any) -> dict[int, float]:
    """The result's sparse vector as ``{token_id: weight}`` (Chroma's sparse format).

    Empty when the result has no sparse output or lacks either half; a repeated token id keeps its
    last weight and unpaired trailing entries are dropped, as ``dict(zip(...))`` does.
    """
    sparse = _field(result, "sparse")
    if sparse is None:
        return {}
    indices, values = _field(sparse, "indices"), _field(sparse, "values")
    if indices is None or values is None:
        return {}
    return dict(zip(_to_list(indices), _to_list(values), strict=False))


def normalize_sparse_vector(sparse: Any) -> SparseVector:
    """A sparse output already taken out of its result (e.g. one named vector) as plain lists.

    Unlike ``sparse_embedding``, a sparse vector missing either half counts as wholly empty.
    """
    indices, values = _field(sparse, "indices"), _field(sparse, "values")
    if indices is None or values is None:
        return {"indices": [], "values": []}
    return {"indices": _to_list(indices), "values": _to_list(values)}


def multivector_embedding(raw: Any) -> list[list[float]]:
    """A multivector (one vector per token) as nested lists, the form stores take for ColBERT fields.

    Takes the 2-D array the clients return, or a list of per-token arrays or lists.
    """
    if hasattr(raw, "tolist"):
        nested: list[list[float]] = raw.tolist()
        return nested
    if isinstance(raw, list) and raw and hasattr(raw[0], "tolist"):
        return [row.tolist() for row in raw]
    return [list(row) for row in raw]
