"""What a model's worker tries when a batch runs out of device memory (``SIE_OOM_RECOVERY__*``), in the
public server's names and defaults: free the allocator's caches and run again, evict the least
recently used other model and run again, run the batch in halves recursively; then, or with recovery
off, the batch fails ``RESOURCE_EXHAUSTED`` with ``retry_after_s``.

The runner and the worker (``engine.runner``, ``engine.worker``) carry the steps out; this is only
the plan they read.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class OomAction(StrEnum):
    CACHE_CLEAR = "cache_clear"  # free the allocator's caches, run the batch again
    EVICT_LRU = "evict_lru"  # unload the least recently used other idle model, run again
    SPLIT_BATCH = "split_batch"  # run it in halves, each halved again while it fails: the last resort


DEFAULT_STRATEGY = (OomAction.CACHE_CLEAR, OomAction.EVICT_LRU, OomAction.SPLIT_BATCH)


@dataclass(frozen=True)
class OomRecovery:
    enabled: bool = True
    strategy: tuple[OomAction, ...] = DEFAULT_STRATEGY  # in order, each at most once
    max_split_depth: int = 4  # halvings of a split batch: 4 runs it in up to 16 pieces
    eviction_lock_timeout_s: float = 5.0  # how long an eviction may hold the batch before the next step
    retry_after_s: int = 5  # the Retry-After of RESOURCE_EXHAUSTED

    def steps(self) -> tuple[OomAction, ...]:
        """The actions to try, none when recovery is off."""
        return tuple(dict.fromkeys(self.strategy)) if self.enabled else ()
