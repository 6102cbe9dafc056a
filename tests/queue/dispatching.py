"""What the dispatcher tests over a real nats-server share: a pool, a work subject and a request's
work items as the gateway builds them (tests/gateway/test_dispatch_acks.py,
tests/security/test_sec_queue_results.py)."""

from __future__ import annotations

import time

from sie.gateway.dispatch import Dispatcher
from sie.queue.codec import Envelope, work_items
from sie.queue.contract import WorkItem, work_subject
from sie.wire.requests import EncodeRequest, Item

POOL = "default"
SUBJECT = work_subject(POOL, "cpu", "default", "some/model")


def requested(dispatcher: Dispatcher, request_id: str, count: int) -> list[WorkItem]:
    """``count`` text items of one encode request, replying to ``dispatcher``'s inbox, 30 s to live."""
    now = time.time()
    envelope = Envelope(
        request_id,
        "some/model",
        POOL,
        "cpu",
        dispatcher.router_id,
        dispatcher.reply_subject(request_id),
        now,
        now + 30,
    )
    return work_items(EncodeRequest(items=[Item(text=f"t{i}") for i in range(count)]), envelope)
