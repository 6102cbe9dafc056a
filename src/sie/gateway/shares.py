"""Each tenant's share of a pool's work stream.

A pool's stream holds at most ``STREAM_MAX_MSGS`` items and refuses new ones once full (discard new),
so one caller publishing without pause would answer every other caller of the pool 503 until its
items drain. A gateway therefore counts the items each token has in flight per pool and refuses a
request that would take that token past its share (``SIE_GATEWAY_TENANT_STREAM_SHARE`` of the
stream): 503 ``QUEUE_FULL`` with ``Retry-After``, which clients already retry. The count is per
gateway: N gateways let a token hold N shares at most. With auth off there are no tenants to tell
apart, and no share.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sie.errors import SieError
from sie.queue.streams import STREAM_MAX_MSGS
from sie.wire.errors import ErrorCode


class ShareExhausted(SieError):
    code = ErrorCode.QUEUE_FULL

    def __init__(self, pool: str, held: int, limit: int) -> None:
        super().__init__(
            f"This token has {held} items in flight in pool '{pool}'; its share of the pool's queue is "
            f"{limit} items. Retry when some are answered."
        )


class StreamShares:
    def __init__(self, share: float) -> None:
        self.limit = max(1, int(STREAM_MAX_MSGS * share))
        self._held: dict[tuple[str, str], int] = {}

    @contextmanager
    def hold(self, owner: str | None, pool: str, items: int) -> Iterator[None]:
        """``items`` counted against ``owner``'s share of ``pool`` while the request is in flight."""
        if owner is None:
            yield
            return
        key = (owner, pool)
        held = self._held.get(key, 0)
        if held + items > self.limit:
            raise ShareExhausted(pool, held, self.limit)
        self._held[key] = held + items
        try:
            yield
        finally:
            left = self._held[key] - items
            if left:
                self._held[key] = left
            else:
                del self._held[key]  # an idle token costs nothing
