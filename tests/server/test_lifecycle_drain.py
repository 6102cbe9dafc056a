"""The drain after SIGTERM on a clock of the test's own: every poll advances it by the poll period."""

from __future__ import annotations

from sie.server.lifecycle import DRAIN_POLL_S, Lifecycle


class Time:
    def __init__(self) -> None:
        self.now = 0.0
        self.on_tick: list = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        for hook in self.on_tick:
            hook()


def lifecycle(time: Time, timeout_s: float = 1.0, min_s: float = 0.0) -> Lifecycle:
    return Lifecycle(timeout_s, min_s, clock=time.clock, sleep=time.sleep)


async def test_the_drain_ends_when_the_last_request_is_answered():
    time = Time()
    life = lifecycle(time)
    life.in_flight = 2
    answered_at = {3: 1, 5: 0}  # after the 3rd poll one request is left, after the 5th none
    polls = [0]

    def tick() -> None:
        polls[0] += 1
        life.in_flight = answered_at.get(polls[0], life.in_flight)

    time.on_tick.append(tick)
    assert await life.drain() is True
    assert life.draining and polls[0] == 5
    assert abs(time.now - 5 * DRAIN_POLL_S) < 1e-9


async def test_an_overdue_drain_refuses_what_is_left_and_reports_it():
    time = Time()
    life = lifecycle(time, timeout_s=0.5)
    life.in_flight = 1
    refused: list[float] = []

    async def on_overdue() -> None:
        refused.append(time.now)
        life.in_flight = 0  # the engine's close answers them with 503

    life.on_overdue = on_overdue
    assert await life.drain() is False
    assert len(refused) == 1 and 0.5 <= refused[0] < 0.5 + DRAIN_POLL_S + 1e-9


async def test_the_drain_lasts_at_least_its_minimum_even_when_idle():
    time = Time()
    life = lifecycle(time, timeout_s=10.0, min_s=2.0)
    assert await life.drain() is True
    assert 2.0 <= time.now < 2.0 + DRAIN_POLL_S + 1e-9
