"""How many CPU threads one batch's forward gets: all of them only when the batch is worth splitting.

A forward split over threads pays a fork and a join at every operator, and its threads wake each
other up (or spin waiting) in between. A batch of a few hundred thousand multiply-adds per operator
finishes sooner on one thread: a lone query on a 1-layer, 32-wide encoder cost 0.8 ms on one
thread and, on two, as long plus an OpenMP thread spinning most of the time between requests
(bench/host_path.py). A real model's lone query is already worth two (MiniLM: 0.3 GFLOP, 6.4 ms on
two threads against 7.2 on one, bf16, this 2-core AMX VM). The cut-off below sits between the two:
about a tenth of a GFLOP per thread, counting the forward's dense layers (2 x the non-embedding
parameters per token; attention's quadratic part is left out, it only makes long batches longer).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

import torch

FLOPS_PER_THREAD: Final = 1e8


def threads_for(flops: float, most: int) -> int:
    return max(1, min(most, int(flops // FLOPS_PER_THREAD)))


def flops_per_token(model: Any) -> float:
    """2 x the parameters a token goes through: every one but the embedding tables'."""
    counted = (
        p.numel() for name, p in model.named_parameters() if "embed" not in name and "pooler" not in name
    )
    return 2.0 * float(sum(counted))


class ThreadsPerBatch:
    """Sizes the intra-op threads of one forward from its token count, and gives the thread count back
    after it: the device thread runs every model's batches, and families that set their threads
    only at load (GLiNER, ONNX) must find them as they left them. CPU models only: ``most`` None or
    1 leaves the threads alone."""

    def __init__(self, most: int | None, per_token: float) -> None:
        self._most = most if most is not None and most > 1 else None
        self._per_token = per_token

    @contextmanager
    def sized(self, tokens: int) -> Iterator[int]:
        before = torch.get_num_threads()
        if self._most is None:
            yield before
            return
        wanted = threads_for(tokens * self._per_token, self._most)
        if wanted == before:
            yield wanted
            return
        torch.set_num_threads(wanted)
        try:
            yield wanted
        finally:
            torch.set_num_threads(before)
