"""The units a work result carries, from a response's usage and summed back into one ``usage``."""

from __future__ import annotations

from sie.queue.units import plain, summed, units_of
from sie.wire.responses import ContentTokens, ScoreUsage, Usage


def test_units_name_what_the_usage_counts() -> None:
    assert units_of(Usage(12)) == {"input_tokens": 12}
    assert units_of(Usage(0, images=2)) == {"input_tokens": 0, "images": 2}
    score = ScoreUsage(40, None, ContentTokens(25))
    assert units_of(score) == {"input_tokens": 40, "content_input_tokens": 25}


def test_summed_adds_tokens_and_images_and_keeps_a_whole_content_only() -> None:
    told = [{"input_tokens": 3, "images": 1}, {"input_tokens": 4}, None]
    assert summed(told) == ScoreUsage(7, 1, None)
    assert summed([{"input_tokens": 5}, {"input_tokens": 6}]).images is None
    both = [{"input_tokens": 9, "content_input_tokens": 6}, {"input_tokens": 8, "content_input_tokens": 5}]
    assert summed(both) == ScoreUsage(17, None, ContentTokens(11))
    partial = [{"input_tokens": 9, "content_input_tokens": 6}, {"input_tokens": 8}]
    assert summed(partial).input_tokens_details is None  # half a breakdown would mislead
    assert summed([]) == ScoreUsage(0)


def test_round_trip_and_plain() -> None:
    usage = ScoreUsage(11, 2, ContentTokens(7))
    assert summed([units_of(usage)]) == usage
    assert plain(usage) == Usage(11, 2)
