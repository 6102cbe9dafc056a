"""The device thread's half of a batch: the adapter's forward (per length chunk unless it packs tokens),
then postprocessing. The worker calls it without knowing which family or output it runs."""

from __future__ import annotations

import time
from dataclasses import dataclass

from sie.adapters.base import Adapter, BatchOutputs, Forward, ItemOutputs, Prepared
from sie.engine.batcher import split_by_padded_cost
from sie.postprocess.outputs import FixedDense, Postprocess, finish


@dataclass(frozen=True)
class BatchGroup:
    """Items that can share one forward and one postprocessing step (the batcher's group key)."""

    forward: Forward
    post: Postprocess


class ModelRunner:
    def __init__(self, adapter: Adapter, max_tokens: int, fixed: FixedDense | None = None) -> None:
        self._adapter = adapter
        self._max_tokens = max_tokens
        self._fixed = fixed

    def __call__(self, batch: list[Prepared], group: BatchGroup) -> tuple[list[ItemOutputs], float, float]:
        """Per-item outputs plus the forward's and the postprocessing's seconds; ``batch`` is sorted by
        cost (the batcher's order), which the length chunks rely on."""
        start = time.perf_counter()
        if self._adapter.packs_tokens:
            chunks = [range(len(batch))]
        else:
            chunks = split_by_padded_cost([item.cost for item in batch], self._max_tokens)
        outputs = BatchOutputs.concat(
            [self._adapter.run([batch[i] for i in chunk], group.forward) for chunk in chunks]
        )
        infer_end = time.perf_counter()
        outputs = finish(outputs, group.post, group.forward.is_query, self._fixed)
        return outputs.items(len(batch)), infer_end - start, time.perf_counter() - infer_end
