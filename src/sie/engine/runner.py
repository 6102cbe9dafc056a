"""The device thread's half of a batch: the adapter's forward (per length chunk unless it packs tokens),
then postprocessing. The worker calls it without knowing which family or output it runs.

Out of memory in a forward is ``OutOfMemory`` to the worker, which recovers as ``SIE_OOM_RECOVERY__*``
says (``engine.oom``, in the public server's order by default): free the allocator's caches and run
again (``free_caches`` here), evict another model (the worker asks the engine), run the batch in
halves, recursively, down to the split depth (``run_split`` here), and only then fail the batch with
``ResourceExhausted``.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

import torch

from sie.adapters.batch import BatchOutputs, ItemOutputs, Prepared
from sie.adapters.contract import Adapter, Forward
from sie.core import heap
from sie.engine.batcher import split_by_padded_cost
from sie.engine.errors import OutOfMemory
from sie.postprocess.muvera import MuveraStage
from sie.postprocess.outputs import Postprocess, finish

log = logging.getLogger(__name__)

MAX_SPLIT_DEPTH: Final = 4  # at most 16 pieces (SIE_OOM_RECOVERY__MAX_SPLIT_DEPTH)


def is_out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError | torch.OutOfMemoryError):
        return True
    message = str(exc).lower()
    return isinstance(exc, RuntimeError) and (
        "out of memory" in message or "can't allocate memory" in message
    )


def free_caches() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    heap.return_free_memory()


@dataclass(frozen=True)
class BatchGroup:
    """An item's forward and postprocessing. Groups compare (and hash) by the forward alone, so the
    batcher puts items in one batch whenever they can share a forward, even when they want different
    output dtypes or normalisation: the runner postprocesses each kind of item apart afterwards."""

    forward: Forward
    post: Postprocess = field(compare=False)


class ModelRunner:
    def __init__(self, adapter: Adapter, max_tokens: int, muvera: MuveraStage | None = None) -> None:
        self._adapter = adapter
        self._max_tokens = max_tokens
        self._muvera = muvera

    def run(
        self, batch: list[Prepared], groups: Sequence[BatchGroup]
    ) -> tuple[list[ItemOutputs], float, float]:
        """Per-item outputs plus the forward's and the postprocessing's seconds. ``groups`` are the
        items' own (equal forwards); ``batch`` is sorted by cost (the batcher's order), which the length
        chunks rely on."""
        start = time.perf_counter()
        forward = groups[0].forward
        try:
            outputs = self._forward(batch, forward)
        except Exception as exc:
            if is_out_of_memory(exc):
                raise OutOfMemory(str(exc)) from exc
            raise
        infer_end = time.perf_counter()
        posts = [group.post for group in groups]
        if all(post == posts[0] for post in posts):
            items = finish(outputs, posts[0], forward.is_query, self._muvera).items(len(batch))
        else:
            items = self._finish_apart(outputs, posts, forward.is_query)
        return items, infer_end - start, time.perf_counter() - infer_end

    def _forward(self, batch: list[Prepared], forward: Forward) -> BatchOutputs:
        if self._adapter.packs_tokens:
            chunks = [range(len(batch))]
        else:
            chunks = split_by_padded_cost([item.cost for item in batch], self._max_tokens)
        return BatchOutputs.concat(
            [self._adapter.run([batch[i] for i in chunk], forward) for chunk in chunks]
        )

    def free_caches(self) -> None:
        free_caches()

    def run_split(
        self,
        batch: list[Prepared],
        groups: Sequence[BatchGroup],
        max_depth: int = MAX_SPLIT_DEPTH,
        depth: int = 1,
    ) -> tuple[list[ItemOutputs], float, float]:
        """The batch in two halves (by cost: ``batch`` is sorted), each split again while it runs out of
        memory, to ``max_depth`` halvings; past that, or for a single item, ``OutOfMemory`` (the
        worker's to turn into ``ResourceExhausted``)."""
        if len(batch) < 2 or depth > max_depth:
            raise OutOfMemory(f"a piece of {len(batch)} item(s) at split depth {depth - 1}")
        middle = len(batch) // 2
        items: list[ItemOutputs] = []
        infer_s = post_s = 0.0
        for part in (slice(0, middle), slice(middle, None)):
            try:
                done = self.run(batch[part], groups[part])
            except OutOfMemory:
                done = self.run_split(batch[part], groups[part], max_depth, depth + 1)
            items += done[0]
            infer_s += done[1]
            post_s += done[2]
        return items, infer_s, post_s

    def _finish_apart(
        self, outputs: BatchOutputs, posts: list[Postprocess], is_query: bool
    ) -> list[ItemOutputs]:
        """Each kind of postprocessing on its own items, vectorised per kind, results in batch order."""
        items: list[ItemOutputs | None] = [None] * len(posts)
        for post in dict.fromkeys(posts):
            rows = [i for i, p in enumerate(posts) if p == post]
            finished = finish(outputs.take(rows), post, is_query, self._muvera).items(len(rows))
            for row, item in zip(rows, finished, strict=True):
                items[row] = item
        return [item for item in items if item is not None]
