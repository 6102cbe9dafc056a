"""The decoding options of the families that generate their reading (Donut, Florence-2).

``max_new_tokens`` bounds the reading, ``num_beams`` widens the search (1 is greedy); both come from
the request or the profile, and anything but a positive integer is the client's error, named with the
family's words, before the item is queued. Beams are capped: each holds its own copy of the decoder's
state, so a client's thousand beams would be a device out of memory (or the host's, on a CPU).
"""

from __future__ import annotations

from typing import Final

from sie.adapters.options import integer_option
from sie.core.task import Task

MAX_BEAMS: Final = 16


def decoding(task: Task | None, family: str, new_tokens: int) -> tuple[int, int]:
    """``max_new_tokens`` (``new_tokens`` unless asked) and ``num_beams`` (1, greedy; at most ``MAX_BEAMS``)."""
    new = integer_option(task, "max_new_tokens", new_tokens, family)
    return new, integer_option(task, "num_beams", 1, family, high=MAX_BEAMS)
