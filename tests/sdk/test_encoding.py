"""``sie.sdk.encoding``: results as plain Python lists and dicts, checked directly and against the public SDK.

The point of these helpers is that the output holds only Python ``int``/``float``/``list``/``dict``
(JSON-serialisable, accepted by any vector store client), so the tests check types as well as values.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

import sie.sdk
from sie.sdk import EncodeResult, encoding
from sie.sdk.encoding import (
    dense_embedding,
    multivector_embedding,
    normalize_sparse_vector,
    sparse_embedding,
    sparse_embedding_dict,
)

from .helper_cases import ENCODING, ENCODING_CASES, assert_same

INDICES = np.array([7, 30522, 7, 2], dtype=np.int32)
VALUES = np.array([0.5, 1.5, 2.5, 0.25], dtype=np.float16)


def result() -> EncodeResult:
    return EncodeResult(
        model="m",
        dense=np.array([0.1, -0.2, 0.3], dtype=np.float32),
        sparse={"indices": INDICES, "values": VALUES},
        multivector=np.array([[0.5, 1.0], [-0.25, 2.0]], dtype=np.float16),
    )


def only_python_types(value: object) -> bool:
    if isinstance(value, list):
        return all(only_python_types(v) for v in value)
    if isinstance(value, dict):
        return all(only_python_types(k) and only_python_types(v) for k, v in value.items())
    return type(value) in (int, float, str)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8", "uint8"])
def test_dense_embedding_gives_python_numbers_of_the_same_value(dtype: str) -> None:
    array = np.array([1, 2, 3, 100], dtype=dtype)
    vector = dense_embedding({"dense": array})
    assert vector == array.astype(np.float64).tolist()
    assert only_python_types(vector)
    assert {type(v) for v in vector} == ({int} if array.dtype.kind in "iu" else {float})


def test_dense_embedding_reads_objects_and_refuses_missing_vectors() -> None:
    assert dense_embedding(SimpleNamespace(dense=np.ones(2, np.float32))) == [1.0, 1.0]
    assert dense_embedding({"dense": [0.5, 0.25]}) == [0.5, 0.25]
    with pytest.raises(ValueError, match="dense"):
        dense_embedding({"sparse": {}})
    with pytest.raises(ValueError, match="dense"):
        dense_embedding(SimpleNamespace())
    assert dense_embedding({}, strict=False) == []


def test_sparse_embedding_keeps_order_and_duplicates() -> None:
    sparse = sparse_embedding(result())
    assert sparse == {"indices": [7, 30522, 7, 2], "values": [0.5, 1.5, 2.5, 0.25]}
    assert only_python_types(sparse)
    assert sparse_embedding(SimpleNamespace(sparse=SimpleNamespace(indices=[1], values=[0.5]))) == {
        "indices": [1],
        "values": [0.5],
    }


def test_sparse_embedding_missing_parts_are_empty() -> None:
    assert sparse_embedding({"dense": np.ones(2)}) == {"indices": [], "values": []}
    # Only the missing half is empty (normalize_sparse_vector drops both, see below).
    assert sparse_embedding({"sparse": {"indices": INDICES}}) == {"indices": [7, 30522, 7, 2], "values": []}


def test_sparse_embedding_dict_has_int_keys_and_the_last_weight_wins() -> None:
    weights = sparse_embedding_dict(result())
    assert weights == {7: 2.5, 30522: 1.5, 2: 0.25}
    assert all(type(k) is int and type(v) is float for k, v in weights.items())
    assert list(weights) == [7, 30522, 2]


def test_sparse_embedding_dict_edge_cases() -> None:
    assert sparse_embedding_dict({}) == {}
    assert sparse_embedding_dict({"sparse": {"values": VALUES}}) == {}
    short = {"sparse": {"indices": INDICES, "values": VALUES[:2]}}
    assert sparse_embedding_dict(short) == {7: 0.5, 30522: 1.5}
    assert sparse_embedding_dict({"sparse": {"indices": INDICES[:0], "values": VALUES[:0]}}) == {}


def test_normalize_sparse_vector_takes_the_sparse_part_itself() -> None:
    expected = {"indices": [7, 30522, 7, 2], "values": [0.5, 1.5, 2.5, 0.25]}
    assert normalize_sparse_vector(result()["sparse"]) == expected
    assert normalize_sparse_vector(SimpleNamespace(indices=INDICES, values=VALUES)) == expected
    assert normalize_sparse_vector({"indices": (1,), "values": (0.5,)}) == {"indices": [1], "values": [0.5]}
    for incomplete in ({"indices": INDICES}, {"values": VALUES}, None, SimpleNamespace()):
        assert normalize_sparse_vector(incomplete) == {"indices": [], "values": []}


def test_multivector_embedding_gives_nested_python_lists() -> None:
    nested = multivector_embedding(result()["multivector"])
    assert nested == [[0.5, 1.0], [-0.25, 2.0]]
    assert only_python_types(nested)
    assert multivector_embedding(list(np.eye(2, dtype=np.float32))) == [[1.0, 0.0], [0.0, 1.0]]
    assert multivector_embedding([[1.0, 2.0]]) == [[1.0, 2.0]]
    assert multivector_embedding(((1.0, 2.0),)) == [[1.0, 2.0]]
    assert multivector_embedding([]) == []
    assert multivector_embedding(np.zeros((0, 4), np.float32)) == []


def test_everything_is_json_serialisable() -> None:
    r = result()
    converted = [
        dense_embedding(r),
        sparse_embedding(r),
        sparse_embedding_dict(r),
        normalize_sparse_vector(r["sparse"]),
        multivector_embedding(r["multivector"]),
    ]
    assert json.loads(json.dumps(converted))[0] == converted[0]


def test_helpers_are_exported_at_top_level_as_the_public_sdk_does() -> None:
    for name in (*ENCODING, "SparseVector"):
        assert getattr(sie.sdk, name) is getattr(encoding, name)
        assert name in sie.sdk.__all__
    assert "maxsim" not in sie.sdk.__all__  # scoring stays in its own module, as in sie_sdk


@pytest.mark.parametrize("case", ENCODING_CASES)
def test_same_as_the_public_sdk(case: str, our_helper_results, public_helper_results) -> None:
    """Same values, Python types, key order and errors as ``sie_sdk.encoding``, exactly."""
    assert_same(our_helper_results["outcomes"][case], public_helper_results["outcomes"][case], where=case)


@pytest.mark.parametrize("name", ENCODING)
def test_same_signatures_as_the_public_sdk(name: str, our_helper_results, public_helper_results) -> None:
    assert our_helper_results["signatures"][name] == public_helper_results["signatures"][name]


def test_same_top_level_exports_as_the_public_sdk(our_helper_results, public_helper_results) -> None:
    assert our_helper_results["top_level"] == public_helper_results["top_level"]
