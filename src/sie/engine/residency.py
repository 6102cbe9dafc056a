"""Which loaded models may leave: recency and use, with no I/O.

Every request touches its model (least recently used first out) and holds it while it runs; a model
that is held, or has items queued, is never a victim. The engine asks for victims under memory
pressure (never its only loaded model) and for idle ones (``SIE_IDLE_EVICT_S``), and does the unloading.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass, field


@dataclass
class Residency:
    clock: Callable[[], float] = time.monotonic
    _last_used: dict[str, float] = field(default_factory=dict)
    _held: Counter[str] = field(default_factory=Counter)

    def hold(self, name: str) -> None:
        self._held[name] += 1
        self._last_used[name] = self.clock()

    def release(self, name: str) -> None:
        self._held[name] -= 1
        if self._held[name] <= 0:
            del self._held[name]
        self._last_used[name] = self.clock()

    def loaded(self, name: str) -> None:
        """A fresh load counts as a use: it is not the first to go."""
        self._last_used[name] = self.clock()

    def forget(self, name: str) -> None:
        self._last_used.pop(name, None)

    def is_held(self, name: str) -> bool:
        return self._held[name] > 0

    def least_recent(
        self, loaded: Iterable[str], busy: Callable[[str], bool], keep: Container[str] = ()
    ) -> list[str]:
        """The models that could go now, least recently used first."""
        free = [n for n in loaded if n not in keep and not self.is_held(n) and not busy(n)]
        return sorted(free, key=lambda n: self._last_used.get(n, 0.0))

    def idle_for(self, name: str) -> float:
        return self.clock() - self._last_used.get(name, self.clock())
