"""Cost-based batch assembly as a pure data structure: no asyncio, no torch, no clock reads.

Entries of one *group* (items that can share a forward pass, e.g. the same pooling) are batched
together, oldest group first. A batch leaves when it is full (token budget or item count), when its
oldest entry has waited ``max_wait_s``, or when the caller flushes because the device is idle.
Cancelled entries are dropped as they are met. Batches come out sorted by cost, shortest first.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

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
        taken: list[Entry[P]] = []
        kept: deque[Entry[P]] = deque()
        total = 0
        full = False
        for entry in self._queue:
            if full or entry.group != oldest.group:
                kept.append(entry)
                continue
            if entry.is_cancelled():
                continue
            if taken and total + entry.cost > self.limits.max_tokens:
                full = True
                kept.append(entry)
                continue
            taken.append(entry)
            total += entry.cost
            full = len(taken) >= self.limits.max_items or total >= self.limits.max_tokens
        ready = full or flush or now - oldest.enqueued_at >= self.limits.max_wait_s
        if not ready:
            return None
        self._queue = kept
        return sorted(taken, key=lambda e: e.cost)


def split_by_padded_cost(costs: list[int], max_tokens: int) -> list[range]:
    """Cut a cost-sorted batch into consecutive chunks whose padded size (longest x count) fits the budget.

    Sorting first means each chunk pads only to its own longest member, which is what keeps padding
    waste low when short and long texts share a batch.
    """
    chunks: list[range] = []
    start = 0
    for index, cost in enumerate(costs):
        if index > start and cost * (index - start + 1) > max_tokens:
            chunks.append(range(start, index))
            start = index
    if costs:
        chunks.append(range(start, len(costs)))
    return chunks
