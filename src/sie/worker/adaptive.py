"""How long the pull loop waits for work before fetching again: seed 001's adaptive quantum.

While the stream is empty the wait doubles up to the ceiling, so an idle worker does not spin. Once
work flows, the wait is steered to hold the observed p50 latency of answered items at the target: a
p50 under the target lets the wait grow (bigger fetches, fuller batches), one over it shrinks the
wait (items leave sooner). With too few observations it starts again from the floor.
"""

from __future__ import annotations

import statistics
from collections import deque
from typing import Final

GAIN: Final = 0.2  # of the p50 error added to the wait per fetch
WINDOW: Final = 200  # latencies the p50 is taken over
MIN_SAMPLES: Final = 10


class AdaptiveWait:
    def __init__(self, min_s: float = 0.002, max_s: float = 0.015, target_p50_s: float = 0.050) -> None:
        if not 0 < min_s <= max_s:
            raise ValueError(f"the wait's floor must be positive and at most its ceiling ({min_s} > {max_s})")
        self.min_s, self.max_s, self.target_p50_s = min_s, max_s, target_p50_s
        self.wait_s = min_s
        self._latencies: deque[float] = deque(maxlen=WINDOW)

    def observe(self, latency_s: float) -> None:
        """One answered item's latency (from its publication to its answer)."""
        self._latencies.append(latency_s)

    def idle(self) -> None:
        """A fetch found nothing."""
        self.wait_s = min(self.wait_s * 2, self.max_s)

    def worked(self) -> None:
        """A fetch brought work."""
        if len(self._latencies) < MIN_SAMPLES:
            self.wait_s = self.min_s
            return
        error = self.target_p50_s - statistics.median(self._latencies)
        self.wait_s = min(self.max_s, max(self.min_s, self.wait_s + error * GAIN))
