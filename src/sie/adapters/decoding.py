"""The decoding options of the families that generate their reading (Donut, Florence-2).

``max_new_tokens`` bounds the reading, ``num_beams`` widens the search (1 is greedy); both come from
the request or the profile, and anything but a positive integer is the client's error, named with the
family's words, before the item is queued. Beams are capped: each holds its own copy of the decoder's
state, so a client's thousand beams would be a device out of memory (or the host's, on a CPU).
"""

from __future__ import annotations

from typing import Any, Final

from sie.adapters.base import Task, UnsupportedInput

MAX_BEAMS: Final = 16


def _positive_int(task: Task | None, name: str, default: int, family: str) -> int:
    value: Any = task.option(name, default) if task else default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UnsupportedInput(f"{family} option '{name}' must be a positive integer, got {value!r}")
    return value


def decoding(task: Task | None, family: str, new_tokens: int) -> tuple[int, int]:
    """``max_new_tokens`` (``new_tokens`` unless asked) and ``num_beams`` (1, greedy; at most ``MAX_BEAMS``)."""
    beams = _positive_int(task, "num_beams", 1, family)
    if beams > MAX_BEAMS:
        raise UnsupportedInput(f"{family} option 'num_beams' must be at most {MAX_BEAMS}, got {beams}")
    return _positive_int(task, "max_new_tokens", new_tokens, family), beams
