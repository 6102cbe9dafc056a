"""The pull loop's adaptive wait: it widens on an empty stream and is steered to the p50 target."""

from __future__ import annotations

import pytest

from sie.worker.adaptive import MIN_SAMPLES, AdaptiveWait


def test_an_empty_stream_doubles_the_wait_up_to_the_ceiling():
    wait = AdaptiveWait(0.002, 0.015, 0.050)
    seen = []
    for _ in range(5):
        wait.idle()
        seen.append(wait.wait_s)
    assert seen == pytest.approx([0.004, 0.008, 0.015, 0.015, 0.015])


def test_work_with_few_observations_starts_again_from_the_floor():
    wait = AdaptiveWait(0.002, 0.015, 0.050)
    wait.idle()
    for _ in range(MIN_SAMPLES - 1):
        wait.observe(0.010)
    wait.worked()
    assert wait.wait_s == 0.002


def test_the_wait_grows_under_the_target_and_shrinks_over_it_within_bounds():
    wait = AdaptiveWait(0.002, 0.015, 0.050)
    for _ in range(MIN_SAMPLES):
        wait.observe(0.020)  # p50 30 ms under the target: wait longer, batch more
    wait.worked()
    assert wait.wait_s == pytest.approx(0.002 + 0.030 * 0.2)
    wait.worked()
    assert wait.wait_s == pytest.approx(0.014)
    wait.worked()
    assert wait.wait_s == 0.015  # clamped to the ceiling
    for _ in range(200):
        wait.observe(0.200)  # the window now holds only slow answers: p50 150 ms over the target
    wait.worked()
    assert wait.wait_s == 0.002  # clamped to the floor


def test_a_floor_above_the_ceiling_is_refused():
    with pytest.raises(ValueError, match="at most its ceiling"):
        AdaptiveWait(0.02, 0.01, 0.05)
