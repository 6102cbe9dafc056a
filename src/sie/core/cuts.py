"""The cheapest cut of a length-sorted run of items into consecutive chunks.

Two places pay per chunk and per padded slot: the worker cutting a batch into padded forward calls
(``sie.engine.batcher.split_by_padded_cost``) and the packed encoder cutting its sequences into
attention buckets (``sie.adapters.runtime.packed_bert.attention_buckets``). Both are this one dynamic
programme over sorted lengths, each with its own price for a chunk.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def cheapest_cuts(count: int, chunk_cost: Callable[[np.ndarray, int], np.ndarray]) -> list[range]:
    """Consecutive ranges covering ``range(count)`` whose summed ``chunk_cost`` is least.

    ``chunk_cost(starts, end)`` prices the chunks ``[start, end)`` for every ``start`` in ``starts``
    (``0 .. end - 1``), ``inf`` where such a chunk is not allowed; a one-item chunk must always be
    allowed. Among equally cheap cuts the last chunk is the shortest.
    """
    best = np.zeros(count + 1)
    cut = np.zeros(count + 1, dtype=np.int64)
    for end in range(1, count + 1):
        totals = best[:end] + chunk_cost(np.arange(end), end)
        start = end - 1 - int(np.argmin(totals[::-1]))
        cut[end], best[end] = start, totals[start]
    chunks: list[range] = []
    end = count
    while end > 0:
        chunks.append(range(int(cut[end]), end))
        end = int(cut[end])
    return chunks[::-1]
