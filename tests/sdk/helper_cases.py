"""The same calls of the client-side helpers, made through our ``sie.sdk`` and the public ``sie_sdk``.

The public SDK needs Python >= 3.12 and our tests run on 3.11, so this file serves both sides: the
tests import it and call ``run(our scoring, our encoding)``, and the ``run_public_sdk`` fixture runs
its source as a script in the public SDK's venv, which prints ``run(sie_sdk.scoring,
sie_sdk.encoding)`` as JSON. Hence only the standard library and numpy here, and inputs built by exact
arithmetic rather than a random generator, so both interpreters (and numpy versions) see the same bits.

Each outcome records types as well as values (a numpy scalar where a Python float is promised is a
difference), and for an exception its type and which argument its message names.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np

SCORING = ("maxsim", "maxsim_batch")
ENCODING = (
    "dense_embedding",
    "sparse_embedding",
    "sparse_embedding_dict",
    "normalize_sparse_vector",
    "multivector_embedding",
)


def grid(rows: int, dim: int, dtype: str = "float32", seed: int = 0) -> np.ndarray:
    """A ``[rows, dim]`` matrix of values in [-1, 1], the same bits on every platform."""
    k = np.arange(rows * dim, dtype=np.int64) + 31 * seed
    values = ((k * 7919 + seed * 104729) % 997 - 498) / 499.0
    return values.reshape(rows, dim).astype(dtype)


def unit(rows: int, dim: int, seed: int = 0) -> np.ndarray:
    """Rows scaled to unit length, as ColBERT outputs are (float32, then rounded to float32 again)."""
    m = grid(rows, dim, "float64", seed)
    return (m / np.linalg.norm(m, axis=1, keepdims=True)).astype(np.float32)


def _scoring_cases() -> list[tuple[str, str, tuple[Any, ...]]]:
    q = unit(5, 16, seed=1)
    docs = [unit(n, 16, seed=10 + n) for n in (1, 3, 7, 12)]
    many = [unit(1 + (i % 40), 64, seed=i) for i in range(300)]  # spans several scoring blocks
    loud = np.full((4, 64), 200, dtype=np.float16)  # float16 sums would overflow (65504)
    queries = [unit(n, 16, seed=50 + n) for n in (2, 5, 9)]
    return [
        ("maxsim-float32", "maxsim", (q, docs)),
        ("maxsim-float16", "maxsim", (q.astype(np.float16), [d.astype(np.float16) for d in docs])),
        (
            "maxsim-mixed-dtypes",
            "maxsim",
            (
                q.astype(np.float16),
                [docs[0], docs[1].astype(np.float64), (grid(3, 16, seed=4) * 100).astype(np.int8)],
            ),
        ),
        ("maxsim-int8", "maxsim", (grid(3, 16, seed=2) * 100, [(grid(4, 16, seed=3) * 100).astype(np.int8)])),
        ("maxsim-nested-lists", "maxsim", (q.tolist(), [d.tolist() for d in docs])),
        ("maxsim-tuple-of-docs", "maxsim", (q, tuple(docs))),
        ("maxsim-one-2d-document", "maxsim", (q, docs[2])),
        ("maxsim-3d-stack", "maxsim", (q, np.stack([unit(6, 16, seed=s) for s in range(4)]))),
        ("maxsim-no-documents", "maxsim", (q, [])),
        ("maxsim-many-documents", "maxsim", (unit(8, 64, seed=99), many)),
        ("maxsim-float16-no-overflow", "maxsim", (loud, [loud, loud[:1]])),
        ("maxsim-identical", "maxsim", (q, [q])),
        ("maxsim-error-query-1d", "maxsim", (q[0], docs)),
        ("maxsim-error-query-3d", "maxsim", (q[None], docs)),
        ("maxsim-error-query-empty", "maxsim", (q[:0], docs)),
        ("maxsim-error-document-1d", "maxsim", (q, [docs[0], docs[1][0]])),
        ("maxsim-error-document-empty", "maxsim", (q, [docs[0], docs[1], docs[2][:0]])),
        ("maxsim-error-dim", "maxsim", (q, [docs[0], docs[1], unit(3, 8)])),
        ("maxsim-error-ragged-lists", "maxsim", (q, [[[1.0, 0.0], [1.0]]])),
        ("maxsim-error-1d-ndarray-documents", "maxsim", (q, docs[0][0])),
        ("batch-float32", "maxsim_batch", (queries, docs)),
        (
            "batch-float16",
            "maxsim_batch",
            ([x.astype(np.float16) for x in queries], [d.astype(np.float16) for d in docs]),
        ),
        ("batch-many-documents", "maxsim_batch", ([unit(4, 64, seed=s) for s in range(3)], many)),
        ("batch-3d-stacks", "maxsim_batch", (np.stack(queries[:1] * 2), np.stack([docs[2]] * 3))),
        ("batch-no-queries", "maxsim_batch", ([], docs)),
        ("batch-no-documents", "maxsim_batch", (queries, [])),
        ("batch-nothing", "maxsim_batch", ([], [])),
        ("batch-mixed-query-dims-no-documents", "maxsim_batch", ([unit(2, 8), unit(2, 16)], [])),
        ("batch-error-mixed-query-dims", "maxsim_batch", ([unit(2, 16), unit(2, 8)], docs)),
        ("batch-error-query-empty", "maxsim_batch", ([queries[0], queries[1][:0]], docs)),
        ("batch-error-document-without-queries", "maxsim_batch", ([], [docs[0], docs[1][0]])),
        ("batch-error-dim", "maxsim_batch", (queries, [docs[0], unit(2, 32)])),
    ]


def _encoding_cases() -> list[tuple[str, str, tuple[Any, ...], dict[str, Any]]]:
    dense = grid(1, 12, seed=5)[0]
    indices = np.array([3, 17, 17, 250_000], dtype=np.int32)
    weights = np.array([0.5, 1.25, 2.0, 0.125], dtype=np.float32)
    sparse = {"indices": indices, "values": weights}
    mv = grid(3, 4, seed=6)
    cases: list[tuple[str, str, tuple[Any, ...], dict[str, Any]]] = [
        *(
            (f"dense-{dtype}", "dense_embedding", ({"dense": (dense * 100).astype(dtype)},), {})
            for dtype in ("float32", "float16", "float64", "int8")
        ),
        ("dense-uint8", "dense_embedding", ({"dense": ((dense + 1) * 100).astype(np.uint8)},), {}),
        ("dense-list", "dense_embedding", ({"dense": [0.5, 1, 2.25]},), {}),
        ("dense-tuple", "dense_embedding", ({"dense": (0.5, 1.5)},), {}),
        ("dense-attribute", "dense_embedding", (SimpleNamespace(dense=dense),), {}),
        ("dense-missing", "dense_embedding", ({"sparse": sparse},), {}),
        ("dense-none", "dense_embedding", ({"dense": None},), {}),
        ("dense-missing-lenient", "dense_embedding", ({},), {"strict": False}),
        ("dense-attribute-missing-lenient", "dense_embedding", (object(),), {"strict": False}),
        ("sparse", "sparse_embedding", ({"sparse": sparse},), {}),
        (
            "sparse-float16-uint32",
            "sparse_embedding",
            ({"sparse": {"indices": indices.astype(np.uint32), "values": weights.astype(np.float16)}},),
            {},
        ),
        ("sparse-lists", "sparse_embedding", ({"sparse": {"indices": [1, 2], "values": (0.5, 0.25)}},), {}),
        ("sparse-attribute", "sparse_embedding", (SimpleNamespace(sparse=SimpleNamespace(**sparse)),), {}),
        ("sparse-missing", "sparse_embedding", ({"dense": dense},), {}),
        ("sparse-values-missing", "sparse_embedding", ({"sparse": {"indices": indices}},), {}),
        (
            "sparse-empty-arrays",
            "sparse_embedding",
            ({"sparse": {"indices": indices[:0], "values": weights[:0]}},),
            {},
        ),
        ("sparse-dict", "sparse_embedding_dict", ({"sparse": sparse},), {}),
        (
            "sparse-dict-float16",
            "sparse_embedding_dict",
            ({"sparse": {"indices": indices.astype(np.int64), "values": weights.astype(np.float16)}},),
            {},
        ),
        (
            "sparse-dict-lists",
            "sparse_embedding_dict",
            ({"sparse": {"indices": [4, 1], "values": [0.5, 0.25]}},),
            {},
        ),
        (
            "sparse-dict-unequal-lengths",
            "sparse_embedding_dict",
            ({"sparse": {"indices": indices, "values": weights[:2]}},),
            {},
        ),
        (
            "sparse-dict-attribute",
            "sparse_embedding_dict",
            (SimpleNamespace(sparse=SimpleNamespace(**sparse)),),
            {},
        ),
        ("sparse-dict-missing", "sparse_embedding_dict", ({},), {}),
        ("sparse-dict-half-missing", "sparse_embedding_dict", ({"sparse": {"values": weights}},), {}),
        ("normalize", "normalize_sparse_vector", (sparse,), {}),
        ("normalize-attribute", "normalize_sparse_vector", (SimpleNamespace(**sparse),), {}),
        ("normalize-lists", "normalize_sparse_vector", ({"indices": (1, 2), "values": [0.5, 0.25]},), {}),
        ("normalize-half-missing", "normalize_sparse_vector", ({"indices": indices},), {}),
        ("normalize-none", "normalize_sparse_vector", (None,), {}),
        *(
            (f"multivector-{dtype}", "multivector_embedding", ((mv * 100).astype(dtype),), {})
            for dtype in ("float32", "float16", "int8")
        ),
        ("multivector-list-of-arrays", "multivector_embedding", (list(mv),), {}),
        ("multivector-list-of-lists", "multivector_embedding", (mv.tolist(),), {}),
        ("multivector-tuple-of-tuples", "multivector_embedding", (((0.5, 1.0), (2.0, 4.0)),), {}),
        ("multivector-empty", "multivector_embedding", ([],), {}),
        ("multivector-empty-array", "multivector_embedding", (mv[:0],), {}),
    ]
    return cases


def describe(value: Any) -> Any:
    """A JSON form of a result that keeps what equality must see: types, dtypes, shapes and dict keys."""
    if isinstance(value, np.ndarray):
        return {"ndarray": str(value.dtype), "shape": list(value.shape), "data": describe(value.tolist())}
    if isinstance(value, dict):
        return {"dict": [[describe(k), describe(v)] for k, v in value.items()]}
    if isinstance(value, (list, tuple)):
        return {type(value).__name__: [describe(v) for v in value]}
    return {type(value).__name__: value if isinstance(value, (int, float, str, type(None))) else repr(value)}


def _named_argument(message: str) -> str | None:
    """Which argument an error blames (``query``, ``queries[1]``, ``documents[2]``): it must agree."""
    found = re.search(r"\b(?:queries|documents)\[\d+\]", message) or re.search(r"\bquery\b", message)
    return found.group(0) if found else None


def _outcome(function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    try:
        return {"value": describe(function(*args, **kwargs))}
    except Exception as error:
        return {"error": type(error).__name__, "names": _named_argument(str(error))}


def _signature(function: Callable[..., Any]) -> list[list[Any]]:
    """Parameter names, kinds and defaults (annotations are spelt differently on each side)."""
    return [
        [p.name, p.kind.name, None if p.default is inspect.Parameter.empty else repr(p.default)]
        for p in inspect.signature(function).parameters.values()
    ]


def run(scoring: ModuleType, encoding: ModuleType, package: ModuleType) -> dict[str, Any]:
    """Every case's outcome, the helpers' signatures and what the package exports at top level."""
    outcomes: dict[str, Any] = {}
    for name, function, args in _scoring_cases():
        outcomes[name] = _outcome(getattr(scoring, function), args, {})
    for name, function, args, kwargs in _encoding_cases():
        outcomes[name] = _outcome(getattr(encoding, function), args, kwargs)
    helpers = {*SCORING, *ENCODING, "SparseVector"}
    return {
        "outcomes": outcomes,
        "signatures": {
            **{name: _signature(getattr(scoring, name)) for name in SCORING},
            **{name: _signature(getattr(encoding, name)) for name in ENCODING},
        },
        "top_level": sorted(name for name in package.__all__ if name in helpers),
    }


SCORING_CASES = [name for name, *_ in _scoring_cases()]
ENCODING_CASES = [name for name, *_ in _encoding_cases()]


def assert_same(ours: Any, public: Any, *, rel: float = 0.0, where: str = "") -> None:
    """Equal ``describe`` forms; floats may differ by ``rel`` (scores summed in another order)."""
    if isinstance(public, dict) and set(public) == {"float"} and isinstance(ours, dict) and "float" in ours:
        tolerance = rel * max(1.0, abs(public["float"]))
        assert abs(ours["float"] - public["float"]) <= tolerance, f"{where}: {ours} != {public}"
    elif isinstance(public, dict):
        assert isinstance(ours, dict) and sorted(ours) == sorted(public), f"{where}: {ours} != {public}"
        for key in public:
            assert_same(ours[key], public[key], rel=rel, where=f"{where}.{key}")
    elif isinstance(public, list):
        assert isinstance(ours, list) and len(ours) == len(public), f"{where}: {ours} != {public}"
        for i, (mine, theirs) in enumerate(zip(ours, public, strict=True)):
            assert_same(mine, theirs, rel=rel, where=f"{where}[{i}]")
    else:
        assert ours == public, f"{where}: {ours!r} != {public!r}"


if __name__ == "__main__":
    import sie_sdk
    from sie_sdk import encoding as public_encoding
    from sie_sdk import scoring as public_scoring

    print(json.dumps(run(public_scoring, public_encoding, sie_sdk)))
