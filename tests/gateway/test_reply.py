"""The gateway's reply from work results: msgpack splices each worker's bytes unread, JSON decodes
them, and items that failed beside answered ones are listed under ``errors``."""

from __future__ import annotations

import json

import msgpack
import numpy as np

from sie.gateway.reply import Gathered, render
from sie.queue.contract import WorkResult
from sie.wire import codec
from sie.wire.responses import DenseVector, EncodeResult


def _answer(index: int, vector: list[float], tokens: int, images: int | None = None) -> WorkResult:
    result = EncodeResult(id=f"i{index}", dense=DenseVector(3, "float32", np.array(vector, dtype=np.float32)))
    raw = codec.encode(result, as_json=False)
    return WorkResult(
        "w",
        "r",
        index,
        True,
        result_msgpack=raw,
        inference_ms=2.0 + index,
        queue_ms=1.0,
        units={"input_tokens": tokens} | ({"images": images} if images is not None else {}),
    )


def _failure(index: int) -> WorkResult:
    return WorkResult("w", "r", index, False, error="boom", error_code="INFERENCE_ERROR")


def test_msgpack_splices_the_workers_bytes_and_lists_failures() -> None:
    results = [_answer(0, [1, 0, 0], 4), _failure(1), _answer(2, [0, 1, 0], 5)]
    gathered = Gathered.of(results)
    assert gathered.usage.input_tokens == 9 and [r.item_index for r in gathered.failures] == [1]
    body = render("encode", "m", None, gathered, 12.5, as_json=False)
    for answered in (results[0], results[2]):
        assert answered.result_msgpack is not None and answered.result_msgpack in body  # spliced as is
    decoded = msgpack.unpackb(body, raw=False, strict_map_key=False)
    assert [item["id"] for item in decoded["items"]] == ["i0", "i2"]
    assert decoded["errors"] == [{"item_index": 1, "code": "INFERENCE_ERROR", "message": "boom"}]
    assert decoded["timing"]["inference_ms"] == 4.0 and decoded["timing"]["total_ms"] == 12.5
    assert list(decoded) == ["model", "items", "timing", "usage", "errors"]
    assert decoded["usage"] == {"input_tokens": 9}  # the failed item bills nothing


def test_json_decodes_the_arrays() -> None:
    gathered = Gathered.of([_answer(0, [0.5, 0.25, 0.0], 3)])
    body = json.loads(render("encode", "m", None, gathered, 1.0, as_json=True))
    assert body["items"] == [
        {"id": "i0", "dense": {"dims": 3, "dtype": "float32", "values": [0.5, 0.25, 0.0]}}
    ]
    assert "errors" not in body


def test_score_unwraps_the_one_result() -> None:
    scores = [{"item_id": "b", "score": 0.9, "rank": 0}, {"item_id": "item-1", "score": 0.1, "rank": 1}]
    result = WorkResult("w", "r", 0, True, result_msgpack=msgpack.packb(scores), units={"input_tokens": 7})
    body = json.loads(render("score", "m", "q", Gathered.of([result]), 1.0, as_json=True))
    assert body == {"model": "m", "query_id": "q", "scores": scores, "usage": {"input_tokens": 7}}


def test_encode_usage_sums_tokens_and_images_over_the_answers() -> None:
    results = [_answer(0, [1, 0, 0], 4, images=0), _answer(1, [0, 1, 0], 0, images=1), _failure(2)]
    body = json.loads(render("encode", "m", None, Gathered.of(results), 1.0, as_json=True))
    assert body["usage"] == {"input_tokens": 4, "images": 1}


def test_score_usage_keeps_the_content_breakdown() -> None:
    scores = [{"item_id": "a", "score": 0.5, "rank": 0}]
    units = {"input_tokens": 30, "content_input_tokens": 21}
    result = WorkResult("w", "r", 0, True, result_msgpack=msgpack.packb(scores), units=units)
    body = msgpack.unpackb(render("score", "m", None, Gathered.of([result]), 1.0, as_json=False))
    assert body["usage"] == {"input_tokens": 30, "input_tokens_details": {"content_tokens": 21}}
