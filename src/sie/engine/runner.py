"""The device thread's half of a batch: the adapter's forward (per length chunk unless it packs tokens),
then postprocessing. The worker calls it without knowing which family or output it runs."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from sie.adapters.base import Adapter, BatchOutputs, Forward, ItemOutputs, Prepared
from sie.engine.batcher import split_by_padded_cost
from sie.postprocess.outputs import FixedDense, Postprocess, finish


@dataclass(frozen=True)
class BatchGroup:
    """An item's forward and postprocessing. Groups compare (and hash) by the forward alone, so the
    batcher puts items in one batch whenever they can share a forward, even when they want different
    output dtypes or normalisation: the runner postprocesses each kind of item apart afterwards."""

    forward: Forward
    post: Postprocess = field(compare=False)


class ModelRunner:
    def __init__(self, adapter: Adapter, max_tokens: int, fixed: FixedDense | None = None) -> None:
        self._adapter = adapter
        self._max_tokens = max_tokens
        self._fixed = fixed

    def __call__(
        self, batch: list[Prepared], groups: Sequence[BatchGroup]
    ) -> tuple[list[ItemOutputs], float, float]:
        """Per-item outputs plus the forward's and the postprocessing's seconds. ``groups`` are the
        items' own (equal forwards); ``batch`` is sorted by cost (the batcher's order), which the length
        chunks rely on."""
        start = time.perf_counter()
        forward = groups[0].forward
        if self._adapter.packs_tokens:
            chunks = [range(len(batch))]
        else:
            chunks = split_by_padded_cost([item.cost for item in batch], self._max_tokens)
        outputs = BatchOutputs.concat(
            [self._adapter.run([batch[i] for i in chunk], forward) for chunk in chunks]
        )
        infer_end = time.perf_counter()
        posts = [group.post for group in groups]
        if all(post == posts[0] for post in posts):
            items = finish(outputs, posts[0], forward.is_query, self._fixed).items(len(batch))
        else:
            items = self._finish_apart(outputs, posts, forward.is_query)
        return items, infer_end - start, time.perf_counter() - infer_end

    def _finish_apart(
        self, outputs: BatchOutputs, posts: list[Postprocess], is_query: bool
    ) -> list[ItemOutputs]:
        """Each kind of postprocessing on its own items, vectorised per kind, results in batch order."""
        items: list[ItemOutputs | None] = [None] * len(posts)
        for post in dict.fromkeys(posts):
            rows = [i for i, p in enumerate(posts) if p == post]
            finished = finish(outputs.take(rows), post, is_query, self._fixed).items(len(rows))
            for row, item in zip(rows, finished, strict=True):
                items[row] = item
        return [item for item in items if item is not None]
