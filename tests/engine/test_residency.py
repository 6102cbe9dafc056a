"""Which loaded models may be evicted: never one a request holds or one with items queued; least
recently used first. Pure logic on an injected clock."""

from __future__ import annotations

from sie.engine.residency import Residency


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_least_recently_used_first_and_never_held_busy_or_kept() -> None:
    clock = Clock()
    residency = Residency(clock)
    for name in ("a", "b", "c", "d"):
        residency.loaded(name)
        clock.now += 1
    residency.hold("a")  # a request is running on a
    residency.release("a")  # ...and ends: a is now the most recent
    residency.hold("b")  # b is held right now
    busy = {"c"}  # c has items queued
    assert residency.least_recent(["a", "b", "c", "d"], busy.__contains__) == ["d", "a"]
    assert residency.least_recent(["a", "b", "c", "d"], busy.__contains__, keep={"d"}) == ["a"]
    residency.release("b")
    assert residency.least_recent(["a", "b", "c", "d"], busy.__contains__) == ["d", "a", "b"]


def test_holds_nest_and_idle_time_counts_from_the_last_release() -> None:
    clock = Clock()
    residency = Residency(clock)
    residency.loaded("m")
    residency.hold("m")
    residency.hold("m")
    clock.now = 5
    residency.release("m")
    assert residency.is_held("m")
    residency.release("m")
    assert not residency.is_held("m")
    clock.now = 12
    assert residency.idle_for("m") == 7
    residency.forget("m")
    assert residency.least_recent(["m"], lambda _: False) == ["m"]
