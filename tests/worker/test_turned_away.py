"""``TurnedAway``: a pull request that would be open when an item this worker NAKed for another worker
is offered again waits until just after the offer; one that ends before it opens at once."""

from __future__ import annotations

import pytest

from sie.worker.turned_away import AFTER_S, BEFORE_S, TurnedAway


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_request_spanning_an_offer_waits_until_just_after_it_and_one_clear_of_it_does_not() -> None:
    clock = Clock()
    away = TurnedAway(clock)
    assert away.wait_before_pull(0.015) == 0.0  # nothing turned away
    away.nakked(1.0)  # offered again at 101.0
    assert away.wait_before_pull(0.015) == 0.0  # 100.000-100.015: clear of it
    clock.now = 101.0 - BEFORE_S - 0.016  # this request would end just before the hole
    assert away.wait_before_pull(0.015) == 0.0
    clock.now = 100.99
    assert away.wait_before_pull(0.015) == pytest.approx(0.01 + AFTER_S)  # open after 101.03
    clock.now = 101.0 + AFTER_S
    assert away.wait_before_pull(0.015) == 0.0  # the hole is over, and forgotten
    assert away._offers == []


def test_the_nearest_offer_decides_and_later_ones_are_kept_for_later_pulls() -> None:
    clock = Clock()
    away = TurnedAway(clock)
    away.nakked(2.0)
    away.nakked(1.0)
    clock.now = 100.995
    assert away.wait_before_pull(0.015) == pytest.approx(0.005 + AFTER_S)
    clock.now = 101.0 + AFTER_S
    assert away.wait_before_pull(0.015) == 0.0
    clock.now = 101.99
    assert away.wait_before_pull(0.015) == pytest.approx(0.01 + AFTER_S)
