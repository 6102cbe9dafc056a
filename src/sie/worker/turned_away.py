"""Items this worker turned away, and when JetStream offers them again: the pull loop keeps no pull
request open at that moment, so a worker that can serve them gets them.

A worker whose model failed to load for a reason that may heal (a full disk) NAKs the model's items
for another worker (``work.NakDelays.elsewhere_s``). JetStream offers a NAKed item, once its delay is
over, to the oldest pull request waiting, whosever it is; the worker that turned it away is idle for
that model and renews its requests at once, so it is waiting more often than a busy worker that
serves, and got the item back more than half the time (each time one delivery and one delay spent;
after 19, the client gets the failure). With no request of its own open from a little before the
offer to a little after, the item goes to another worker's request, or waits in the stream for the
next request, and the other workers renew theirs within milliseconds. On a 2-core machine at 20
requests a second (tests/e2e/test_cluster_disk_full.py's cluster), 120 items came back to the full
worker 166 times without the hole, 47 times with it. The cost is that hole in this worker's pulls,
35 ms per item turned away; when no other worker pulls, the item comes back after the hole.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

BEFORE_S: Final = 0.005  # closed this long before the offer: the worker's and JetStream's timers differ
AFTER_S: Final = 0.03  # and this long after: another worker's request renews within it


class TurnedAway:
    """When the items NAKed for another worker are offered again (this process's monotonic clock)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._offers: list[float] = []

    def nakked(self, delay_s: float) -> None:
        """An item was NAKed for another worker just now, to be offered again after ``delay_s``."""
        self._offers.append(self._clock() + delay_s)

    def wait_before_pull(self, open_s: float) -> float:
        """How long to wait before opening a pull request that stays open ``open_s``: until the end of
        the hole around the next offer that request would span; 0 when it spans none."""
        now = self._clock()
        self._offers = [t for t in self._offers if t + AFTER_S > now]
        spanned = [t for t in self._offers if t - BEFORE_S < now + open_s]
        return min(spanned) + AFTER_S - now if spanned else 0.0
