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


def split_by_padded_cost(costs: list[int], max_tokens: int, call_overhead: int = 128) -> list[range]:
    """Cut a cost-sorted batch into consecutive chunks that minimise padded work.

    Each chunk pads to its own longest member, so one long text must not drag short ones up to its
    length; but every forward call also has a fixed cost, so splitting is not free either. The split
    minimises ``sum(longest x count + call_overhead)`` over chunks (dynamic programming over the sorted
    costs; ``call_overhead`` is in token-equivalents) with every chunk's padded size within
    ``max_tokens`` (a single over-budget item still forms its own chunk).
    """
    n = len(costs)
    best = [0] + [0] * n  # best[i]: cheapest split of costs[:i]
    cut = [0] * (n + 1)
    for end in range(1, n + 1):
        longest = costs[end - 1]
        best[end] = best[end - 1] + longest + call_overhead
        cut[end] = end - 1
        for start in range(end - 2, -1, -1):
            if longest * (end - start) > max_tokens:
                break
            total = best[start] + longest * (end - start) + call_overhead
            if total < best[end]:
                best[end], cut[end] = total, start
    chunks: list[range] = []
    end = n
    while end > 0:
        chunks.append(range(cut[end], end))
        end = cut[end]
    return chunks[::-1]
