"""The one stream and consumer configuration gateways and workers both create.

Whoever comes first creates a pool's stream, so both sides must ask for the same thing (a stream that
exists with another configuration makes the second create fail). Work streams are work queues (a
message is gone once acked), on file storage so a restarted ``nats-server`` still holds the queued
work, bounded in age (nobody waits longer than the gateway's timeout) and in count (``discard new``: a
full stream refuses the publish, which the gateway answers 503 ``QUEUE_FULL``). On a clustered NATS
every stream and bucket is kept in ``replicas`` copies (``SIE_STREAM_REPLICAS``: 3 on three NATS
nodes), so losing the node that leads a stream loses no queued work.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final

from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import NotFoundError

from sie.queue.contract import DEAD_LETTER_PREFIX, STREAM_MAX_AGE_S, pool_stream, pool_stream_subjects

log = logging.getLogger(__name__)

STREAM_MAX_MSGS: Final = 100_000
# An unacked item goes to another worker this long after its worker died. Workers mark items they
# still hold as in progress well within it, so a slow batch is not delivered twice.
ACK_WAIT_S: Final = 10.0
MAX_DELIVER: Final = 20
MAX_ACK_PENDING: Final = 1000


DEAD_LETTER_STREAM: Final = "DEAD_LETTERS"
DEAD_LETTER_MAX_AGE_S: Final = 86_400.0
DEAD_LETTER_DEDUP_WINDOW_S: Final = 120.0
# A dead letter is an item's metadata (``contract.DeadLetter``), a few hundred bytes: one far
# larger is not one the gateway wrote.
DEAD_LETTER_MAX_MSG_BYTES: Final = 16 * 1024


@dataclass(frozen=True)
class DeadLetterLimits:
    """How much ``DEAD_LETTERS`` holds; past either bound the oldest letters go (``discard old``),
    so a storm of failures cannot fill JetStream's volume under the work streams and the pools."""

    max_bytes: int
    max_msgs: int


def dead_letter_stream_config(limits: DeadLetterLimits, replicas: int = 1) -> StreamConfig:
    return StreamConfig(
        name=DEAD_LETTER_STREAM,
        subjects=[f"{DEAD_LETTER_PREFIX}.>"],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        max_age=DEAD_LETTER_MAX_AGE_S,
        max_bytes=limits.max_bytes,
        max_msgs=limits.max_msgs,
        max_msg_size=DEAD_LETTER_MAX_MSG_BYTES,
        discard=DiscardPolicy.OLD,
        duplicate_window=DEAD_LETTER_DEDUP_WINDOW_S,
        num_replicas=replicas,
    )


async def ensure_dead_letter_stream(
    jetstream: JetStreamContext, limits: DeadLetterLimits, replicas: int = 1
) -> None:
    """Create ``DEAD_LETTERS``, or bring an existing one (an older gateway's, or the public one's in
    memory) to these bounds and at least ``replicas`` copies: its storage stays, its limits become ours."""
    wanted = dead_letter_stream_config(limits, replicas)
    try:
        info = await jetstream.stream_info(DEAD_LETTER_STREAM)
    except NotFoundError:
        await jetstream.add_stream(wanted)
        return
    current: StreamConfig = info.config
    bounds = ("max_bytes", "max_msgs", "max_msg_size", "discard", "max_age")
    if any(getattr(current, name) != getattr(wanted, name) for name in bounds):
        current = current.evolve(**{name: getattr(wanted, name) for name in bounds})
        await jetstream.update_stream(current)
    await ensure_replicas(jetstream, current, replicas)


async def ensure_replicas(jetstream: JetStreamContext, current: StreamConfig, replicas: int) -> None:
    """Raise an existing stream to ``replicas`` copies (JetStream copies it to more nodes in place).
    Never lowers: a gateway and a worker configured apart must not take copies away from each other."""
    if (current.num_replicas or 1) >= replicas:
        return
    log.info(
        "stream %s kept %s copies; SIE_STREAM_REPLICAS makes it %d",
        current.name,
        current.num_replicas,
        replicas,
    )
    await jetstream.update_stream(current.evolve(num_replicas=replicas))


def work_stream_config(pool: str, max_age_s: float = STREAM_MAX_AGE_S, replicas: int = 1) -> StreamConfig:
    return StreamConfig(
        name=pool_stream(pool),
        subjects=pool_stream_subjects(pool),
        retention=RetentionPolicy.WORK_QUEUE,
        storage=StorageType.FILE,
        max_age=max_age_s,
        max_msgs=STREAM_MAX_MSGS,
        discard=DiscardPolicy.NEW,
        num_replicas=replicas,
    )


def lane_consumer_config(durable: str, filter_subject: str, max_deliver: int = MAX_DELIVER) -> ConsumerConfig:
    return ConsumerConfig(
        durable_name=durable,
        filter_subject=filter_subject,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=ACK_WAIT_S,
        max_deliver=max_deliver,
        max_ack_pending=MAX_ACK_PENDING,
    )


async def ensure_work_stream(
    jetstream: JetStreamContext, pool: str, max_age_s: float = STREAM_MAX_AGE_S, replicas: int = 1
) -> None:
    """Create the pool's stream unless it exists (whatever its configuration: an operator's wins, and
    a different age is logged, not changed; only too few copies are raised)."""
    try:
        info = await jetstream.stream_info(pool_stream(pool))
    except NotFoundError:
        await jetstream.add_stream(work_stream_config(pool, max_age_s, replicas))
        return
    await ensure_replicas(jetstream, info.config, replicas)
    existing = info.config.max_age
    if existing is not None and abs(existing - max_age_s) > 1e-3:
        log.info(
            "stream %s exists with max_age %gs, not SIE_STREAM_MAX_AGE_S=%gs: it stays as created",
            pool_stream(pool),
            existing,
            max_age_s,
        )


async def ensure_lane_consumer(
    jetstream: JetStreamContext, stream: str, config: ConsumerConfig
) -> ConsumerConfig:
    """Create the lane's durable consumer unless it exists (every worker of the lane shares it), or
    bring an existing one's ``max_deliver`` to this one's (``SIE_MAX_DELIVER``: the setting is the
    operator's word, as the public worker's recreate of a mismatched durable made it); the
    configuration in effect comes back."""
    assert config.durable_name is not None
    try:
        info = await jetstream.consumer_info(stream, config.durable_name)
    except NotFoundError:
        info = await jetstream.add_consumer(stream, config)
    current: ConsumerConfig = info.config
    if current.max_deliver != config.max_deliver:
        log.info(
            "consumer %s had max_deliver %s; SIE_MAX_DELIVER makes it %s",
            config.durable_name,
            current.max_deliver,
            config.max_deliver,
        )
        info = await jetstream.add_consumer(stream, current.evolve(max_deliver=config.max_deliver))
    in_effect: ConsumerConfig = info.config
    return in_effect
