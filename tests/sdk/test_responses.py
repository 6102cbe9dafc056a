"""What comes back: msgpack-numpy bodies decoded into numpy, and the single-vs-list return shapes."""

from __future__ import annotations

import httpx
import msgpack
import numpy as np
import pytest

from sie.sdk import RequestError, ServerError

from .fakes import FakeServer, call, encode_body, ok_encode, packed


async def test_single_item_returns_one_result_with_numpy_dense(make_client):
    client = make_client(FakeServer(ok_encode()))
    result = await call(client, "encode", "m", {"text": "x"})
    assert isinstance(result, dict)
    assert isinstance(result["dense"], np.ndarray)
    assert result["dense"].dtype == np.float32
    assert result["dense"].tolist() == [0.0, 1.0, 2.0]
    assert result["timing"] == {"total_ms": 1.5, "queue_ms": 0.5}
    assert result["model"] == "m"
    assert "id" not in result


async def test_list_in_gives_list_out_in_order(make_client):
    client = make_client(FakeServer(ok_encode(2)))
    results = await call(client, "encode", "m", [{"text": "a"}, {"text": "b"}])
    assert isinstance(results, list)
    assert [r["dense"].tolist() for r in results] == [[0.0, 1.0, 2.0], [1.0, 2.0, 3.0]]


async def test_a_list_of_one_still_returns_a_list(make_client):
    client = make_client(FakeServer(ok_encode(1)))
    results = await call(client, "encode", "m", [{"text": "a"}])
    assert isinstance(results, list)
    assert len(results) == 1


async def test_sparse_and_multivector_unwrap_to_arrays(make_client):
    item = {
        "id": "doc-1",
        "sparse": {
            "dims": 250002,
            "dtype": "float32",
            "indices": np.array([7, 42], dtype=np.int32),
            "values": np.array([0.5, 0.25], dtype=np.float32),
        },
        "multivector": {
            "token_dims": 4,
            "num_tokens": 3,
            "dtype": "float16",
            "values": np.ones((3, 4), dtype=np.float16),
        },
    }
    client = make_client(FakeServer(packed({"model": "m", "items": [item]})))
    result = await call(
        client, "encode", "m", {"id": "doc-1", "text": "x"}, output_types=["sparse", "multivector"]
    )
    assert result["id"] == "doc-1"
    assert result["sparse"]["indices"].tolist() == [7, 42]
    assert result["sparse"]["indices"].dtype == np.int32
    assert result["sparse"]["values"].tolist() == [0.5, 0.25]
    assert result["multivector"].shape == (3, 4)
    assert result["multivector"].dtype == np.float16
    assert "dense" not in result
    assert "timing" not in result


async def test_binary_dense_keeps_its_packed_uint8(make_client):
    packed_bits = np.packbits(np.array([1, 0, 1, 1, 0, 0, 0, 0, 1], dtype=np.uint8))
    body = {"model": "m", "items": [{"dense": {"dims": 9, "dtype": "binary", "values": packed_bits}}]}
    result = await call(
        make_client(FakeServer(packed(body))), "encode", "m", {"text": "x"}, output_dtype="binary"
    )
    assert result["dense"].dtype == np.uint8
    assert result["dense"].tolist() == [176, 128]


async def test_a_json_answer_is_read_too(make_client):
    body = {"model": "m", "items": [{"dense": {"dims": 2, "dtype": "float32", "values": [0.5, 1.5]}}]}
    client = make_client(FakeServer(lambda: httpx.Response(200, json=body)))
    result = await call(client, "encode", "m", {"text": "x"})
    assert isinstance(result["dense"], np.ndarray)
    assert result["dense"].tolist() == [0.5, 1.5]


async def test_fewer_results_than_items_is_refused(make_client):
    client = make_client(FakeServer(ok_encode(1)))
    with pytest.raises(ServerError) as caught:
        await call(client, "encode", "m", [{"text": "a"}, {"text": "b"}])
    assert caught.value.code == "ENCODE_RESULT_COUNT_MISMATCH"
    assert caught.value.status_code is None


async def test_a_body_that_is_not_msgpack_is_a_request_error(make_client):
    bad = lambda: httpx.Response(200, content=b"\xc1garbage", headers={"content-type": "application/msgpack"})  # noqa: E731
    with pytest.raises(RequestError, match="Malformed encode response") as caught:
        await call(make_client(FakeServer(bad)), "encode", "m", {"text": "x"})
    assert caught.value.status_code == 200


async def test_object_arrays_from_a_peer_are_refused(make_client):
    evil = {b"nd": True, b"type": "|O", b"kind": b"O", b"shape": [1], b"data": b"pickle"}
    body = msgpack.packb({"model": "m", "items": [{"dense": {"values": evil}}]}, use_bin_type=True)
    answer = lambda: httpx.Response(200, content=body, headers={"content-type": "application/msgpack"})  # noqa: E731
    with pytest.raises(RequestError, match="Malformed"):
        await call(make_client(FakeServer(answer)), "encode", "m", {"text": "x"})


async def test_score_result_keeps_order_rank_and_query_id(make_client):
    body = {
        "model": "reranker",
        "query_id": "q1",
        "scores": [
            {"item_id": "x", "score": 0.91, "rank": 0},
            {"item_id": "item-0", "score": 0.02, "rank": 1},
        ],
    }
    result = await call(
        make_client(FakeServer(packed(body))), "score", "m", {"id": "q1", "text": "q"}, [{"text": "d"}]
    )
    assert result == {
        "model": "reranker",
        "query_id": "q1",
        "scores": [
            {"item_id": "x", "score": 0.91, "rank": 0},
            {"item_id": "item-0", "score": 0.02, "rank": 1},
        ],
    }


async def test_score_without_query_id_leaves_the_key_out(make_client):
    body = {"model": "m", "query_id": None, "scores": [{"item_id": "item-0", "score": 0.5, "rank": 0}]}
    result = await call(make_client(FakeServer(packed(body))), "score", "m", {"text": "q"}, [{"text": "d"}])
    assert "query_id" not in result
    assert result["scores"][0]["score"] == 0.5


async def test_extract_results_spell_out_every_list(make_client):
    body = {
        "model": "gliner",
        "items": [
            {
                "id": "item-0",
                "entities": [{"text": "Tim Cook", "label": "person", "score": 0.96, "start": 0, "end": 8}],
                "relations": [],
                "classifications": [{"label": "tech", "score": 0.7}],
                "objects": [],
                "data": {},
            },
            {"id": "item-1", "data": {"markdown": "# hi"}},
        ],
    }
    client = make_client(FakeServer(packed(body)))
    first, second = await call(client, "extract", "m", [{"text": "a"}, {"text": "b"}], labels=["person"])
    assert first == {
        "model": "gliner",
        "id": "item-0",
        "entities": [
            {"text": "Tim Cook", "label": "person", "score": 0.96, "start": 0, "end": 8, "bbox": None}
        ],
        "relations": [],
        "classifications": [{"label": "tech", "score": 0.7}],
        "objects": [],
    }
    assert second["data"] == {"markdown": "# hi"}
    assert second["entities"] == []


async def test_a_failed_extract_item_carries_its_error_beside_the_answered_ones(make_client):
    """As the public SDK reads ``items[i].error``: a well-formed one as sent, a malformed one (a broken
    peer's) as ``INTERNAL_ERROR`` rather than an exception that would lose the answered items."""
    failed = {"code": "INPUT_TOO_LONG", "message": "GLiNER reads at most 128 windows"}
    empty: dict[str, object] = {
        "entities": [],
        "relations": [],
        "classifications": [],
        "objects": [],
        "data": {},
    }
    body = {
        "model": "m",
        "items": [
            {"id": "item-0", **empty, "entities": [{"text": "Ada", "label": "person", "score": 0.9}]},
            {"id": "item-1", **empty, "error": failed},
            {"id": "item-2", **empty, "error": {"code": " ", "message": "x"}},
            {"id": "item-3", **empty, "error": "not a map"},
        ],
    }
    client = make_client(FakeServer(packed(body)))
    results = await call(client, "extract", "m", [{"text": t} for t in "abcd"], labels=["person"])
    assert "error" not in results[0] and results[0]["entities"][0]["text"] == "Ada"
    assert results[1]["error"] == failed and results[1]["entities"] == []
    malformed = {"code": "INTERNAL_ERROR", "message": "Malformed extraction item error"}
    assert results[2]["error"] == results[3]["error"] == malformed


async def test_single_extract_returns_one_result(make_client):
    body = {"model": "m", "items": [{"id": "item-0", "entities": []}]}
    result = await call(make_client(FakeServer(packed(body))), "extract", "m", {"text": "a"})
    assert isinstance(result, dict)
    assert result["id"] == "item-0"


async def test_timing_is_copied_into_every_result(make_client):
    client = make_client(FakeServer(packed(encode_body(3))))
    results = await call(client, "encode", "m", [{"text": "a"}] * 3)
    assert [r["timing"]["total_ms"] for r in results] == [1.5, 1.5, 1.5]
