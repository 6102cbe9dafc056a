"""Work items through the engine: each maps to the request an HTTP route would make, the answer to a
result a gateway splices in, and a failure to what the error table says a queue must do. The last test
runs the round trip over a real nats-server: stream, durable pull consumer, reply inbox."""

from __future__ import annotations

import asyncio
import time

import msgpack
import nats
import numpy as np
import pytest

from sie.catalog.errors import InvalidInput
from sie.engine.engine import Engine
from sie.engine.errors import ModelLoadFailed, ModelLoading
from sie.errors import QueueAction
from sie.queue.codec import WorkItemInvalid, request_of
from sie.queue.contract import (
    WorkItem,
    decode_work_item,
    decode_work_result,
    encode_message,
    lane_consumer,
    pool_stream,
    pool_stream_subjects,
    work_subject,
)
from sie.wire.requests import EncodeRequest, ExtractRequest, Item, ScoreRequest
from sie.worker.work import MAX_RETRY_DELAY_S, NakDelays, answered, failed, retry_delay

MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def work(operation: str = "encode", **fields: object) -> WorkItem:
    base = WorkItem(
        "gw-1.0", "gw-1", 0, 1, operation, MINILM, "default", "default", "", "gw", "_INBOX.x", time.time()
    )
    for key, value in fields.items():
        setattr(base, key, value)
    return base


def test_each_operation_maps_to_the_request_its_route_would_make():
    encode = request_of(
        work(item=Item(text="q"), is_query=True, output_types=["dense"], options={"normalize": False})
    )
    assert isinstance(encode, EncodeRequest) and encode.items == [Item(text="q")]
    assert encode.params is not None and encode.params.options == {"normalize": False, "is_query": True}
    score = request_of(work("score", query_item=Item(text="q"), score_items=[Item(text="a"), Item(text="b")]))
    assert isinstance(score, ScoreRequest) and [i.text for i in score.items] == ["a", "b"]
    extract = request_of(work("extract", item=Item(text="John"), labels=["person"]))
    assert (
        isinstance(extract, ExtractRequest)
        and extract.params is not None
        and extract.params.labels == ["person"]
    )
    with pytest.raises(WorkItemInvalid, match="unknown operation 'generate'"):
        request_of(work("generate"))
    with pytest.raises(WorkItemInvalid, match="no item"):
        request_of(work())


def test_failures_follow_the_error_table(caplog):
    bad = failed(work(), InvalidInput("Field 'items[0]' must hold at most 10 bytes of UTF-8 text"), "w1")
    assert bad.action is QueueAction.ANSWER and bad.result is not None
    assert (bad.result.success, bad.result.error_code, bad.result.worker_id) == (
        False,
        "INVALID_INPUT",
        "w1",
    )
    loading = failed(work(), ModelLoading(MINILM), "w1")
    assert (loading.action, loading.retry_after_s) == (QueueAction.RETRY, 5)
    assert loading.result is not None  # sent only once the item cannot wait any longer
    assert (loading.result.error_code, loading.result.retry_after_s) == ("MODEL_LOADING", 5)
    boom = failed(work(), RuntimeError("secret detail"), "w1")
    assert boom.action is QueueAction.GIVE_UP and boom.result is not None
    assert (boom.result.error_code, boom.result.error) == ("INTERNAL_ERROR", "Internal server error")
    logged = [r for r in caplog.records if r.exc_info and r.exc_info[1] is not None]
    assert [str(r.exc_info[1]) for r in logged] == ["secret detail"]  # the traceback stays in the log


def test_retries_wait_longer_each_time_and_never_reach_max_deliver():
    """A 1 s wait (overload, a LoRA loading) used to be 20 deliveries in 20 s and a dead letter; the
    waits now double, so with no deadline the planned delays outlast the stream's 120 s age long
    before the 20th delivery, and the delivery before the last is answered, never NAKed."""
    delays = [retry_delay(1, n, 20, 0.0, None) for n in range(1, 20)]
    assert delays[:6] == [1, 2, 4, 8, 16, MAX_RETRY_DELAY_S]
    assert delays[-1] is None and all(d is not None for d in delays[:-1])  # the 19th: answered
    assert sum(d for d in delays[:8] if d is not None) > 120  # the stream's age passes by delivery 9
    assert retry_delay(5, 3, -1, 0.0, None) == 20  # an unlimited consumer: the waits alone
    # With a deadline: a retry lands at most halfway to it, and none shorter than the table's wait.
    assert retry_delay(1, 3, 20, 100.0, 130.0) == 4
    assert retry_delay(1, 3, 20, 100.0, 105.0) == 2.5
    assert retry_delay(1, 3, 20, 103.5, 105.0) is None
    assert retry_delay(5, 1, 20, 100.0, 109.0) is None  # a 5 s wait does not fit in half of 9 s


def test_a_load_that_failed_here_and_may_heal_is_left_for_another_worker_and_a_permanent_one_answered():
    """A full disk (or memory, or the network) is this worker's: the item is NAKed at a steady short
    wait, so it meets the other workers as often as its deliveries allow, and is answered with the
    failure on the last one. A missing model fails on every worker: answered at once."""
    full = ModelLoadFailed(MINILM, "the disk is full. The server's log has the detail.", 3, False, "STORAGE")
    here = failed(work(), full, "w1")
    assert here.action is QueueAction.RETRY and here.result is not None
    assert (here.result.error_code, here.result.retry_after_s) == ("MODEL_LOAD_FAILED", None)
    assert here.result.error == f"Model '{MINILM}' failed to load (STORAGE): {full.reason}"
    delays = NakDelays()
    assert (delays.first_wait(here, 9), delays.growth(here)) == (1.0, 1.0)
    waits = [retry_delay(1.0, n, 20, 100.0, 130.0, delays.growth(here)) for n in range(1, 20)]
    assert waits == [1.0] * 18 + [None]  # 18 more offers, then answered
    loading = failed(work(), ModelLoading(MINILM), "w1")
    assert delays.growth(loading) == 2.0  # a load under way here: doubling waits, as before
    missing = ModelLoadFailed(MINILM, "its weights are in none of the places", 1, True, "NOT_FOUND")
    everywhere = failed(work(), missing, "w1")
    assert everywhere.action is QueueAction.GIVE_UP and everywhere.result is not None
    assert everywhere.result.error_code == "MODEL_LOAD_FAILED"


async def test_a_work_item_round_trips_over_a_real_jetstream(nats_url: str, engine: Engine):
    """Gateway side publishes to the pool stream and waits on an inbox; worker side pulls from the
    lane's durable consumer, runs the engine, replies, acks. The vector equals a direct engine call."""
    client = await nats.connect(nats_url)
    try:
        jetstream = client.jetstream()
        await jetstream.add_stream(name=pool_stream("default"), subjects=pool_stream_subjects("default"))
        inbox = client.new_inbox()
        replies = await client.subscribe(inbox)
        item = work(item=Item(id="a", text="queues carry work"), reply_subject=inbox, machine_profile="cpu")
        subject = work_subject("default", "cpu", "default", MINILM)
        await jetstream.publish(subject, encode_message(item))

        pull = await jetstream.pull_subscribe(subject, durable=lane_consumer("default", "cpu", "default"))
        (message,) = await pull.fetch(1, timeout=5)
        received = decode_work_item(message.data)
        outcome = answered(received, await engine.encode(received.model_id, request_of(received)), "w1")
        assert outcome.action is QueueAction.ANSWER and outcome.result is not None
        await client.publish(received.reply_subject, encode_message(outcome.result))
        await message.ack()

        reply = await replies.next_msg(timeout=5)
        result = decode_work_result(reply.data)
        assert (result.work_item_id, result.success, result.worker_id) == ("gw-1.0", True, "w1")
        assert result.units == {"input_tokens": 6}
        body = msgpack.unpackb(result.result_msgpack)
        direct = await engine.encode(MINILM, EncodeRequest([Item(id="a", text="queues carry work")]))
        expected = direct.response.items[0].dense.values
        got = np.frombuffer(body["dense"]["values"][b"data"], dtype=np.float32)  # msgpack-numpy: bin keys
        assert body["id"] == "a" and np.allclose(got, expected, atol=1e-6)
        info = await jetstream.consumer_info(
            pool_stream("default"), lane_consumer("default", "cpu", "default")
        )
        assert info.num_ack_pending == 0 and info.num_pending == 0  # acked once, nothing left
    finally:
        await asyncio.wait_for(client.close(), 5)
