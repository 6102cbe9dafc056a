"""Every decoder of a queue message against hostile bytes (audit L5), and the worker's answer to a
malformed work item over a real nats-server: ``term`` (never redelivered), counted.

A message is any peer's: a bug in a newer gateway, or a pod that can publish on NATS. Deep nesting
(msgspec and the JSON parser raise ``RecursionError`` past their depth), wrong types, invalid UTF-8
and random bytes must each become the decoder's own ``ContractError``; anything else escapes the
per-message step, the item is neither acked nor termed and comes back ``MAX_DELIVER`` times.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import nats
import pytest

from sie.catalog.catalog import Catalog
from sie.core.options import ComputePrecision
from sie.engine.engine import Engine, EngineLimits
from sie.engine.loader import LoadSettings
from sie.observability.metrics import Metrics, SkipReason
from sie.queue.contract import (
    ContractError,
    Lane,
    decode_advisory,
    decode_heartbeat,
    decode_work_item,
    decode_work_result,
    lane_consumer,
    pool_stream,
    work_subject,
)
from sie.queue.streams import ensure_work_stream
from sie.weights.sources import WeightSources
from sie.worker.pull import PullLoop
from tests.conftest import MODELS_DIR

DEPTH = 100_000
ITEM = {
    "work_item_id": "r.0",
    "request_id": "r",
    "item_index": 0,
    "total_items": 1,
    "operation": "encode",
    "model_id": "m",
    "profile_id": "default",
    "pool_name": "default",
    "machine_profile": "cpu",
    "router_id": "gw",
    "reply_subject": "_INBOX.gw.r",
    "timestamp": 1.0,
}
RESULT = {"work_item_id": "r.0", "request_id": "r", "item_index": 0, "success": True}


def _with_deep(fields: dict[str, Any], key: str) -> bytes:
    """A msgpack map of ``fields`` plus ``key`` holding ``{"k": [[[...]]]}``, arrays nested ``DEPTH``
    deep (msgpack cannot build it, so the bytes are laid out by hand: a map header counting one
    more pair). As a map it passes the type check of ``options`` and reaches the recursion."""
    pairs = b"".join(msgpack.packb(k) + msgpack.packb(v) for k, v in fields.items())
    deep = b"\x81\xa1k" + b"\x91" * DEPTH + b"\xc0"
    return b"\xde" + (len(fields) + 1).to_bytes(2, "big") + pairs + msgpack.packb(key) + deep


def _json_deep(key: str) -> bytes:
    return b'{"%s": ' % key.encode() + b"[" * DEPTH + b"]" * DEPTH + b"}"


DECODERS: dict[str, tuple[Callable[[bytes], object], list[bytes]]] = {
    "work item": (
        decode_work_item,
        [
            _with_deep(ITEM, "future_field"),  # a key nobody reads is still parsed
            _with_deep(ITEM, "options"),
            b"\x91" * DEPTH + b"\xc0",
            msgpack.packb({**ITEM, "item_index": -1}),
            msgpack.packb({**ITEM, "model_id": b"\xff\xfe"}, use_bin_type=False),  # invalid UTF-8
            b"\xc1garbage",
        ],
    ),
    "work result": (
        decode_work_result,
        [
            _with_deep(RESULT, "future_field"),
            msgpack.packb({**RESULT, "item_index": -2}),
            msgpack.packb([1, 2]),
        ],
    ),
    "heartbeat": (
        decode_heartbeat,
        [_json_deep("future_field"), _json_deep("loaded_models"), b'{"name": 1}', b"\xff"],
    ),
    "advisory": (
        decode_advisory,
        [
            _json_deep("stream"),
            _json_deep("future_field"),
            b'{"stream": "S", "consumer": "c", "stream_seq": "one"}',
            b"[]",
            b"\x00",
        ],
    ),
}


@pytest.mark.parametrize("name", DECODERS)
def test_every_decoder_turns_hostile_bytes_into_a_contract_error(name: str) -> None:
    decode, samples = DECODERS[name]
    for data in samples:
        with pytest.raises(ContractError, match=f"not an? {name}"):
            decode(data)


def test_a_real_advisory_still_decodes() -> None:
    """The JetStream server's own advisory (its JSON, abridged), so the refusals above are not all there is."""
    raw = json.dumps(
        {
            "type": "io.nats.jetstream.advisory.v1.max_deliver",
            "id": "x",
            "timestamp": "2026-01-01T00:00:00Z",
            "stream": "WORK_POOL_default",
            "consumer": "default_cpu_default",
            "stream_seq": 7,
            "deliveries": 20,
        }
    ).encode()
    advisory = decode_advisory(raw)
    assert (advisory.stream, advisory.consumer, advisory.stream_seq, advisory.deliveries) == (
        "WORK_POOL_default",
        "default_cpu_default",
        7,
        20,
    )


LANE = Lane("default", "cpu", "default")


async def test_the_worker_terms_a_malformed_item_once_and_counts_it(nats_url: str, tmp_path: Path) -> None:
    """A work item nested too deep is termed on its first delivery (``+TERM`` on the ack subject),
    never redelivered, and counted ``sie_pull_loop_skipped_total{reason="malformed"}``; a good item
    behind it is still served (the loop did not die on it)."""
    load = LoadSettings("cpu", ComputePrecision.FLOAT32, 1, WeightSources(tmp_path, hf_fallback=False))
    metrics = Metrics()
    engine = Engine(Catalog.from_directory(MODELS_DIR), load, EngineLimits(8, 5, 4096, 1), metrics)
    client = await nats.connect(nats_url)
    try:
        jetstream = client.jetstream()
        await ensure_work_stream(jetstream, LANE.pool)
        acks: list[bytes] = []

        async def ack(message: Any) -> None:
            acks.append(message.data)

        await client.subscribe(f"$JS.ACK.{pool_stream(LANE.pool)}.>", cb=ack)
        loop = PullLoop(engine, client, LANE, "w0", metrics=metrics)
        await loop.start()
        subject = work_subject(LANE.pool, LANE.machine_profile, LANE.bundle, "some/model")
        for poison in (_with_deep(ITEM, "options"), b"\xc1", msgpack.packb({"request_id": 3})):
            await jetstream.publish(subject, poison)
        expired = msgpack.packb({**ITEM, "deadline": time.time() - 1})
        await jetstream.publish(subject, expired)
        deadline = time.monotonic() + 5
        while len(acks) < 4 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)  # nothing comes back
        await loop.stop()
        assert sorted(acks) == [b"", b"+TERM", b"+TERM", b"+TERM"]  # nats-py acks with an empty body
        skipped = metrics.pull_skipped
        assert skipped.labels(SkipReason.MALFORMED.value)._value.get() == 3
        assert skipped.labels(SkipReason.EXPIRED.value)._value.get() == 1
        info = await jetstream.consumer_info(
            pool_stream(LANE.pool), lane_consumer(LANE.pool, LANE.machine_profile, LANE.bundle)
        )
        assert info.num_redelivered == 0 and info.num_ack_pending == 0
    finally:
        await client.close()
