"""How much work a queue worker holds: what it finishes in ``HOLD_S`` at its own recent pace.

Workers of a lane share one durable consumer, and an item a worker pulled is nobody else's until it
settles it (its in-progress marks keep JetStream from redelivering it). A fixed allowance (the
fetch budget per pull, ``SIE_MAX_CONCURRENT_BATCHES`` x the batch size in flight) lets a worker that
is slow for a while (a CPU-starved host, a noisy neighbour, a throttled GPU) pull as much as a fast
one, and the items it cannot start soon wait behind it while a fast worker idles: a 32-item request
waits for its slowest part. So the allowance follows the worker's measured pace: items it ran per
second it was holding work, over its last few samples. A worker that stops finishing (starved from
one moment to the next) stops pulling once nothing has finished for ``HOLD_S``, not after its next
answer. However slow it is a worker may hold ``MIN_HELD``, and that is all it holds until its first
sample: a worker that does not know its pace yet (new, or starved from its first pull) holds one
batch's worth rather than a pull's, so a starved newcomer keeps a few items waiting for a few seconds
instead of a pull's worth for a minute, at the cost of smaller batches in a fast worker's first
``SAMPLE_S`` of work.

``HOLD_S`` (``SIE_NATS_HOLD_S``) trades two costs: long enough that a worker keeps its engine's
pipeline full (a batch running, the next one formed), short enough that a request split over a fast
and a slow worker waits little for the slow one's part. Where one batch takes about ``HOLD_S``
whatever its size (every process of an oversubscribed host), batches shrink towards ``MIN_HELD``
and throughput drops; raise it there. 0 turns the pace off (a worker holds up to its ceiling, the
fixed allowance).

The pace is taken over busy time only (a worker idle for lack of work keeps its pace) and over
items the engine ran (an item NAKed to come back later, or acked unrun past its deadline, took no
device time and says nothing about speed).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from typing import Final

HOLD_S: Final = 2.0  # the work a worker holds, in seconds of its own pace
SAMPLE_S: Final = 0.25  # busy time a sample spans at least (a batch's items finish together)
SAMPLES: Final = 4  # samples the pace is taken over
# The fewest items a worker holds however slow it is: a batch's worth that still hides its latency.
# Held to ``hold_s`` alone, a worker whose one item takes longer than ``hold_s`` (every process of an
# oversubscribed host) would hold one at a time, finish fewer a second for it, and hold fewer still.
MIN_HELD: Final = 16


class Pace:
    def __init__(self, hold_s: float = HOLD_S, clock: Callable[[], float] = time.monotonic) -> None:
        if hold_s < 0:
            raise ValueError(f"the held work's horizon must be positive (or 0: off), not {hold_s} s")
        self.hold_s = hold_s
        self._clock = clock
        self._samples: deque[tuple[int, float]] = deque(maxlen=SAMPLES)  # (items ran, busy seconds)
        self._held = 0
        self._busy_since: float | None = None  # when the current busy stretch began
        self._open_busy_s = 0.0  # busy time of the open sample before the current stretch
        self._open_ran = 0

    def take(self) -> None:
        """An item is held (pulled, not yet settled)."""
        if self._held == 0:
            self._busy_since = self._clock()
        self._held += 1

    def release(self) -> None:
        """An item held was settled (run, NAKed, skipped or failed)."""
        self._held -= 1
        if self._held == 0 and self._busy_since is not None:
            self._open_busy_s += self._clock() - self._busy_since
            self._busy_since = None

    def ran(self) -> None:
        """The engine ran an item (answered or failed): the pace counts it."""
        self._open_ran += 1
        busy = self._open_busy()
        if busy >= SAMPLE_S:
            self._samples.append((self._open_ran, busy))
            self._open_ran, self._open_busy_s = 0, 0.0
            if self._busy_since is not None:
                self._busy_since = self._clock()

    def _open_busy(self) -> float:
        stretch = self._clock() - self._busy_since if self._busy_since is not None else 0.0
        return self._open_busy_s + stretch

    def per_s(self) -> float | None:
        """Items ran per busy second over the samples; once nothing has finished for ``hold_s``
        of work (the open sample that long: a worker starved from one moment to the next), the
        open sample's own pace when lower. A batch that runs within ``hold_s`` is the normal pause
        between answers, and pulling the next one meanwhile keeps the engine's pipeline full.
        None while nothing is known."""
        window = sum(s for _, s in self._samples)
        rate = sum(n for n, _ in self._samples) / window if window > 0 else None
        open_busy = self._open_busy()
        if open_busy >= self.hold_s:
            stalled = self._open_ran / open_busy
            return stalled if rate is None else min(rate, stalled)
        return rate

    def limit(self, ceiling: int) -> int:
        """How many items the worker may hold: ``hold_s`` of its pace, at least ``MIN_HELD``, at
        most ``ceiling``; ``MIN_HELD`` (capped likewise) before its pace is known."""
        if self.hold_s == 0:
            return ceiling
        rate = self.per_s()
        paced = MIN_HELD if rate is None else math.ceil(round(rate * self.hold_s, 6))  # 40.0000001 is 40
        return max(1, min(ceiling, max(MIN_HELD, paced)))
