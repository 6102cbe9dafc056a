"""The queue worker's pace (``SIE_NATS_HOLD_S``): it holds what it finishes in ``hold_s`` at its own
recent speed, measured over the time it had work, so a slow worker leaves the rest of a lane's items
to faster ones. Driven by a clock of the test's own: items are taken, run and released as a pull loop
would."""

from __future__ import annotations

import pytest

from sie.settings.server import Settings
from sie.worker.pace import HOLD_S, MIN_HELD, SAMPLES, Pace


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def run(pace: Pace, clock: Clock, items: int, per_s: float) -> None:
    """``items`` taken together and finished one by one at ``per_s``, as a batch drains."""
    for _ in range(items):
        pace.take()
    for _ in range(items):
        clock.now += 1 / per_s
        pace.ran()
        pace.release()


def test_an_unknown_worker_holds_one_batchs_worth_and_off_means_the_ceiling() -> None:
    clock = Clock()
    pace = Pace(2.0, clock)
    assert pace.per_s() is None
    assert pace.limit(256) == MIN_HELD  # not a pull's worth: it may be starved from the start
    assert pace.limit(8) == 8  # never past the ceiling
    run(pace, clock, MIN_HELD, per_s=1000)  # its first sample: 16 items in 16 ms is too short
    assert pace.per_s() is None and pace.limit(256) == MIN_HELD
    run(pace, clock, 250, per_s=1000)  # a quarter of a second of work: now it knows
    assert pace.per_s() == pytest.approx(1000) and pace.limit(256) == 256
    assert Pace(0, clock).limit(256) == 256
    run(off := Pace(0, clock), clock, 10, per_s=1)  # a slow worker, but the pace is off
    assert off.limit(256) == 256


def test_the_limit_is_hold_s_of_the_workers_own_pace() -> None:
    clock = Clock()
    slow, fast = Pace(2.0, clock), Pace(2.0, clock)
    run(slow, clock, 64, per_s=20)  # 64 items in 3.2 s of work
    run(fast, clock, 64, per_s=1000)
    for _ in range(5):
        run(fast, clock, 64, per_s=1000)
    assert slow.per_s() == pytest.approx(20)
    assert slow.limit(256) == 40  # two seconds of its work, not one pull's worth
    assert fast.per_s() == pytest.approx(1000)
    assert fast.limit(256) == 256  # a fast worker is held back by nothing new


def test_time_without_work_is_not_slowness() -> None:
    clock = Clock()
    pace = Pace(2.0, clock)
    run(pace, clock, 50, per_s=100)
    clock.now += 60  # a minute with nothing to do
    run(pace, clock, 50, per_s=100)
    assert pace.per_s() == pytest.approx(100)
    assert pace.limit(256) == 200


def test_items_settled_unrun_say_nothing_about_speed() -> None:
    """A NAKed item (its model loading) or one past its deadline is released at once, never run."""
    clock = Clock()
    pace = Pace(2.0, clock)
    run(pace, clock, 40, per_s=20)
    for _ in range(100):
        pace.take()
        clock.now += 0.001
        pace.release()
    assert pace.per_s() == pytest.approx(20)  # counted as items, they would make it over 60/s
    assert pace.limit(256) == 40


def test_a_worker_that_stops_finishing_stops_pulling_and_recovers_when_it_speeds_up() -> None:
    clock = Clock()
    pace = Pace(2.0, clock)
    for _ in range(SAMPLES):
        run(pace, clock, 64, per_s=256)
    assert pace.limit(256) == 256
    for _ in range(64):  # starved from one moment to the next: what it holds does not finish
        pace.take()
    clock.now += 1.5
    assert pace.limit(256) == 256  # could still be one long batch
    clock.now += 0.5
    assert pace.limit(256) == MIN_HELD  # nothing finished for hold_s: it pulls nothing more
    for _ in range(64):  # what it holds finishes at the starved pace, 16 a second
        clock.now += 1 / 16
        pace.ran()
        pace.release()
    assert pace.per_s() == pytest.approx(16)
    assert pace.limit(256) == 32  # two seconds of the starved pace
    for _ in range(SAMPLES):
        run(pace, clock, 64, per_s=256)
    assert pace.limit(256) == 256  # set free, it takes its share again


def test_a_batch_running_within_hold_s_does_not_lower_the_limit() -> None:
    """Answers come a batch at a time: the pause while one runs is not slowness, and the worker
    keeps pulling the next batch meanwhile (its engine's pipeline stays full)."""
    clock = Clock()
    pace = Pace(2.0, clock)
    for _ in range(SAMPLES):
        run(pace, clock, 16, per_s=64)
    assert pace.limit(256) == 128
    for _ in range(128):
        pace.take()
    clock.now += 1.875
    assert pace.limit(256) == 128
    clock.now += 0.125  # hold_s with nothing finished: now it is a stall
    assert pace.limit(256) == MIN_HELD


def test_however_slow_a_worker_holds_a_few_items_to_hide_its_latency() -> None:
    """One item at a time taking longer than hold_s (every process of an oversubscribed host): held
    to its pace alone it would hold one, finish fewer for it, and never batch again."""
    clock = Clock()
    pace = Pace(2.0, clock)
    for _ in range(SAMPLES):
        run(pace, clock, 1, per_s=1 / 3)
    assert pace.per_s() == pytest.approx(1 / 3)
    assert pace.limit(256) == MIN_HELD
    assert pace.limit(8) == 8  # the ceiling still rules


def test_a_negative_horizon_is_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        Pace(-1)


def test_sie_nats_hold_s_is_the_workers_horizon(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().nats_hold_s == HOLD_S == 2.0
    monkeypatch.setenv("SIE_NATS_HOLD_S", "0")  # off: the fixed allowance of before
    assert Settings().nats_hold_s == 0
    monkeypatch.setenv("SIE_NATS_HOLD_S", "-1")
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        Settings()
