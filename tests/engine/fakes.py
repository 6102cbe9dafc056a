"""Stand-ins for the device side of a worker: a batch runner with no model, and timers that fire when
the test says so. The worker's logic runs as it does in production around them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sie.adapters.batch import ItemOutputs, Prepared
from sie.engine.errors import OutOfMemory


def items(*lengths: int) -> list[Prepared]:
    return [Prepared(np.arange(n)) for n in lengths]


class FakeRunner:
    """Answers each item with its length as a score; ``fail`` lists what each call raises first. A
    batch that ran out of memory runs on ``split`` when there is one; without, it cannot fit.
    ``freed`` counts cache frees, ``split_depths`` the depth each split was allowed."""

    def __init__(self, *fail: BaseException, split: FakeRunner | None = None) -> None:
        self.fail = list(fail)
        self.split = split
        self.batches: list[list[int]] = []
        self.freed = 0
        self.split_depths: list[int] = []

    def run(self, batch: list[Prepared], groups: Sequence[Any]) -> tuple[list[ItemOutputs], float, float]:
        self.batches.append([p.cost for p in batch])
        if self.fail:
            raise self.fail.pop(0)
        return [ItemOutputs(score=float(p.cost)) for p in batch], 0.001, 0.0

    def free_caches(self) -> None:
        self.freed += 1

    def run_split(
        self, batch: list[Prepared], groups: Sequence[Any], max_depth: int
    ) -> tuple[list[ItemOutputs], float, float]:
        self.split_depths.append(max_depth)
        if self.split is None:
            raise OutOfMemory("a batch that cannot be split here")
        return self.split.run(batch, groups)


@dataclass
class FakeTimer:
    delay: float
    callback: Callable[[], object]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class FakeTimers:
    """``call_later`` that only records; ``fire_pending`` runs the timers not cancelled, as if their
    delay had passed."""

    scheduled: list[FakeTimer] = field(default_factory=list)

    def __call__(self, delay: float, callback: Callable[[], object]) -> FakeTimer:
        timer = FakeTimer(delay, callback)
        self.scheduled.append(timer)
        return timer

    def pending(self) -> list[FakeTimer]:
        return [t for t in self.scheduled if not t.cancelled]

    def fire_pending(self) -> None:
        for timer in self.pending():
            timer.cancelled = True
            timer.callback()
