"""The queue contract: subjects and streams as the public SIE names them, and the two messages as
msgpack maps a public peer writes and reads."""

from __future__ import annotations

import msgpack
import pytest

from sie.queue.contract import (
    ContractError,
    WorkItem,
    WorkResult,
    decode_work_item,
    decode_work_result,
    encode_message,
    lane_consumer,
    model_of_token,
    pool_stream,
    pool_stream_subjects,
    subject_token,
    work_subject,
    worker_consumer,
    worker_stream,
    worker_stream_subjects,
    worker_subject,
)
from sie.wire.requests import Item

REQUIRED = {
    "work_item_id": "gw-1.0",
    "request_id": "gw-1",
    "item_index": 0,
    "total_items": 1,
    "operation": "encode",
    "model_id": "BAAI/bge-m3",
    "profile_id": "default",
    "pool_name": "default",
    "machine_profile": "l4",
    "router_id": "gw",
    "reply_subject": "_INBOX.abc",
    "timestamp": 1700000000.5,
}


def test_subjects_streams_and_consumers_follow_the_public_names():
    assert (
        work_subject("default", "rtx6000", "sglang", "BAAI/bge-m3")
        == "sie.work.default.rtx6000.sglang.BAAI__bge-m3"
    )
    assert subject_token("org/model.v1*x>y z") == "org__model_dot_v1_x_y_z"
    assert model_of_token("BAAI__bge-m3_dot_1") == "BAAI/bge-m3.1"
    assert (pool_stream("l4"), pool_stream_subjects("l4")) == ("WORK_POOL_l4", ["sie.work.l4.*.*.*"])
    assert lane_consumer("default", "l4", "default") == "default_l4_default"
    pod = "sie-worker-0.sie-worker.default.svc"
    assert (
        worker_subject("p", "l4", "b", "m/x", pod)
        == "sie.work.p.l4.b.m__x.sie-worker-0_dot_sie-worker_dot_default_dot_svc"
    )
    assert worker_stream(pod) == "WORK_WORKER_sie-worker-0_dot_sie-worker_dot_default_dot_svc"
    assert worker_stream_subjects("p", "l4", "b", "w") == ["sie.work.p.l4.b.*.w"]
    assert worker_consumer("w") == "gen-w"
    with pytest.raises(ValueError, match="worker id is empty"):
        worker_consumer("  ")


def test_a_public_style_map_decodes_and_unset_keys_stay_out_of_ours():
    raw = msgpack.packb(
        {**REQUIRED, "item": {"id": "a", "text": "hi", "unknown": 1}, "is_query": True, "future_field": [1]}
    )
    work = decode_work_item(raw)
    assert work.item == Item(id="a", text="hi") and work.is_query is True and work.deadline is None
    again = msgpack.unpackb(encode_message(work))
    assert again == {**REQUIRED, "item": {"id": "a", "text": "hi"}, "is_query": True}  # no nil keys


def test_results_round_trip_with_bytes_spliced_unread():
    blob = msgpack.packb({"id": "a", "dense": {"dims": 2}})
    result = WorkResult("gw-1.0", "gw-1", 0, True, result_msgpack=blob, inference_ms=1.5, retry_after_s=None)
    decoded = decode_work_result(encode_message(result))
    assert decoded == result and decoded.result_msgpack == blob
    assert set(msgpack.unpackb(encode_message(result))) == {
        "work_item_id",
        "request_id",
        "item_index",
        "success",
        "result_msgpack",
        "inference_ms",
    }


@pytest.mark.parametrize(
    "raw",
    [b"\xc1", msgpack.packb({"request_id": "x"}), msgpack.packb({**REQUIRED, "item_index": "zero"})],
    ids=["not-msgpack", "missing-fields", "wrong-type"],
)
def test_a_malformed_message_is_a_contract_error(raw: bytes):
    with pytest.raises(ContractError, match="not a work item"):
        decode_work_item(raw)


def test_an_unknown_operation_still_decodes_so_it_can_be_answered():
    assert decode_work_item(msgpack.packb({**REQUIRED, "operation": "generate"})).operation == "generate"
    assert isinstance(decode_work_item(msgpack.packb(REQUIRED)), WorkItem)
