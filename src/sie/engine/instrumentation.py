"""``SIE_INSTRUMENTATION``: detailed batch statistics of one model, for debugging batching.

Off by default. On, every batch a model runs is logged on one line (its items, the requests they
came from, tokens, the padding a padded forward adds, how long its oldest item waited, the forward's
time), kept in bounded series (the newest ``HISTORY`` batches, so a flag left on does not grow
memory), and summarised (min, mean, p50, max of each) when the model stops: unloaded, evicted or shut
down. The always-on metrics (``sie_batch_size``, ``sie_batch_tokens``) are unaffected.
"""

from __future__ import annotations

import logging
import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Final

from sie.engine.worker import BatchStats

log = logging.getLogger(__name__)

HISTORY: Final = 10_000


def _series() -> deque[float]:
    return deque(maxlen=HISTORY)


@dataclass
class BatchStatistics:
    """One model's batches. ``packs_tokens``: its forward packs items without padding, so a batch
    holds exactly its tokens; otherwise each item is padded to the batch's longest."""

    model: str
    packs_tokens: bool
    batches: int = 0
    items: deque[float] = field(default_factory=_series)
    requests: deque[float] = field(default_factory=_series)
    tokens: deque[float] = field(default_factory=_series)
    padding: deque[float] = field(default_factory=_series)  # fraction of the forward's tokens that pad
    wait_ms: deque[float] = field(default_factory=_series)
    forward_ms: deque[float] = field(default_factory=_series)

    def record(self, batch: BatchStats) -> None:
        self.batches += 1
        held = batch.tokens if self.packs_tokens else max(batch.tokens, batch.longest * batch.items)
        padding = 1 - batch.tokens / held if held else 0.0
        wait_ms, forward_ms = batch.wait_s * 1000, batch.seconds * 1000
        for series, value in (
            (self.items, batch.items),
            (self.requests, batch.requests),
            (self.tokens, batch.tokens),
            (self.padding, padding),
            (self.wait_ms, wait_ms),
            (self.forward_ms, forward_ms),
        ):
            series.append(float(value))
        log.info(
            "batch #%d of %s: items=%d requests=%d tokens=%d padded_tokens=%d padding=%.0f%% "
            "wait_ms=%.1f forward_ms=%.1f",
            self.batches,
            self.model,
            batch.items,
            batch.requests,
            batch.tokens,
            held,
            padding * 100,
            wait_ms,
            forward_ms,
        )

    def summary(self) -> str:
        """One line per series over the batches kept; "no batches" before the first."""
        if not self.items:
            return f"batch statistics of {self.model}: no batches"
        rows = [
            f"batch statistics of {self.model}: {self.batches} batches (the last {len(self.items)} below)"
        ]
        for label, series in (
            ("items/batch", self.items),
            ("requests/batch", self.requests),
            ("tokens/batch", self.tokens),
            ("padding %", deque(v * 100 for v in self.padding)),
            ("wait ms", self.wait_ms),
            ("forward ms", self.forward_ms),
        ):
            rows.append(
                f"  {label}: min={min(series):.1f} mean={statistics.fmean(series):.1f} "
                f"p50={statistics.median(series):.1f} max={max(series):.1f}"
            )
        return "\n".join(rows)

    def log_summary(self) -> None:
        log.info("%s", self.summary())
