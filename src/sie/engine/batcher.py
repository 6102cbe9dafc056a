"""Cost-based batch assembly as a pure data structure: no asyncio, no torch, no clock reads.

Entries of one *group* (items that can share a forward pass, e.g. the same pooling) are batched
together, oldest group first; within a group a batch is the oldest entry plus the queued entries
closest to it in length. A batch leaves when it is full (token budget or item count), when its
oldest entry has waited ``max_wait_s``, or when the caller flushes because the device is idle.
Cancelled entries are dropped as they are met. Batches come out sorted by cost, shortest first.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from itertools import accumulate, islice
from typing import Final, Generic, TypeVar

import numpy as np

from sie.core.cuts import cheapest_cuts

P = TypeVar("P")


@dataclass(frozen=True)
class BatchLimits:
    max_tokens: int
    max_items: int
    max_wait_s: float

    def __post_init__(self) -> None:
        if self.max_tokens < 1 or self.max_items < 1 or self.max_wait_s < 0:
            raise ValueError(f"invalid batch limits: {self}")


@dataclass
class Entry(Generic[P]):
    group: Hashable
    cost: int
    enqueued_at: float
    payload: P
    is_cancelled: Callable[[], bool] = field(default=lambda: False)


class Batcher(Generic[P]):
    def __init__(self, limits: BatchLimits) -> None:
        self.limits = limits
        self._queue: deque[Entry[P]] = deque()

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, entry: Entry[P]) -> None:
        self._queue.append(entry)

    def _drop_cancelled_head(self) -> None:
        while self._queue and self._queue[0].is_cancelled():
            self._queue.popleft()

    def deadline(self) -> float | None:
        """When the oldest entry's wait runs out, so the caller knows how long it may sleep."""
        self._drop_cancelled_head()
        return self._queue[0].enqueued_at + self.limits.max_wait_s if self._queue else None

    def next_batch(self, now: float, *, flush: bool = False) -> list[Entry[P]] | None:
        self._drop_cancelled_head()
        if not self._queue:
            return None
        oldest = self._queue[0]
        if flush and len(self._queue) <= self.limits.max_items and self._one_batch():
            taken = sorted(self._queue, key=lambda e: e.cost)  # all of it: the choice below would be too
            self._queue.clear()
            return taken
        scan = self.limits.max_items * _SCAN_FACTOR
        pool = list(
            islice((e for e in self._queue if e.group == oldest.group and not e.is_cancelled()), scan)
        )
        full = len(pool) >= self.limits.max_items or sum(e.cost for e in pool) >= self.limits.max_tokens
        if not (full or flush or now - oldest.enqueued_at >= self.limits.max_wait_s):
            return None
        taken = _similar_lengths_around(pool, oldest, self.limits)
        chosen = {id(e) for e in taken}
        self._queue = deque(e for e in self._queue if id(e) not in chosen)
        return taken

    def _one_batch(self) -> bool:
        """Every queued entry is live, of the oldest's group and together within the token budget."""
        group = self._queue[0].group
        cost = 0
        for entry in self._queue:
            if entry.group != group or entry.is_cancelled():
                return False
            cost += entry.cost
        return cost <= self.limits.max_tokens


_SCAN_FACTOR: Final = 4


def _similar_lengths_around(pool: list[Entry[P]], oldest: Entry[P], limits: BatchLimits) -> list[Entry[P]]:
    """The batch: the oldest entry plus the entries closest to it in length, as many as the limits allow.

    Choosing by length from a window of the queue (``_SCAN_FACTOR`` x the item limit, in arrival order)
    rather than strictly first-come keeps padding low, which is most of a CPU's throughput on mixed
    lengths; the oldest entry is always included, so nothing waits behind newer work forever.
    """
    ordered = sorted(pool, key=lambda e: e.cost)
    position = next(i for i, e in enumerate(ordered) if e is oldest)
    prefix = [0, *accumulate(e.cost for e in ordered)]
    for size in range(min(limits.max_items, len(ordered)), 0, -1):
        best: tuple[int, int] | None = None
        for start in range(max(0, position - size + 1), min(position, len(ordered) - size) + 1):
            end = start + size
            if size > 1 and prefix[end] - prefix[start] > limits.max_tokens:
                continue
            spread = ordered[end - 1].cost - ordered[start].cost
            if best is None or spread < best[0]:
                best = (spread, start)
        if best is not None:
            return ordered[best[1] : best[1] + size]
    return [oldest]


def split_by_padded_cost(costs: list[int], max_tokens: int, call_overhead: int = 128) -> list[range]:
    """Cut a cost-sorted batch into consecutive chunks that minimise padded work.

    Each chunk pads to its own longest member, so one long text must not drag short ones up to its
    length; but every forward call also has a fixed cost, so splitting is not free either. The split
    minimises ``sum(longest x count + call_overhead)`` over chunks (``call_overhead`` is in
    token-equivalents) with every chunk's padded size within ``max_tokens`` (a single over-budget
    item still forms its own chunk).
    """
    sorted_costs = np.asarray(costs, dtype=np.float64)

    def padded(starts: np.ndarray, end: int) -> np.ndarray:
        size = sorted_costs[end - 1] * (end - starts)
        fits = (size <= max_tokens) | (starts == end - 1)
        return np.where(fits, size + call_overhead, np.inf)

    return cheapest_cuts(len(costs), padded)
