"""The workers a gateway knows, from their heartbeats on ``sie.health.>`` (or, in the WebSocket health
mode, their ``/ws/status`` messages: ``status_feed``).

A worker is healthy while it says ``ready`` and its last heartbeat is younger than three publish
intervals; a ``terminated`` heartbeat removes it at once. Routing asks this table which pool and
machine profile serve a bundle; ``/health``, ``/v1/models`` and the scaling gauges read it too.
Every gateway keeps its own table from the same heartbeats, so several gateways agree without talking.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from sie.queue.contract import Heartbeat


@dataclass
class Worker:
    heartbeat: Heartbeat
    seen: float  # monotonic time of its last heartbeat
    url: str = ""  # where its status was read (WebSocket health mode); "" from NATS

    @property
    def name(self) -> str:
        return self.heartbeat.name


class WorkerTable:
    def __init__(self, stale_after_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._stale_after_s = stale_after_s
        self._clock = clock
        self._workers: dict[str, Worker] = {}

    def update(self, heartbeat: Heartbeat, url: str = "") -> None:
        """A worker's latest state, by its URL when it has one (two local workers may share a host
        name), else by its name."""
        key = url or heartbeat.name
        if heartbeat.terminated:
            self._workers.pop(key, None)
            return
        self._workers[key] = Worker(heartbeat, self._clock(), url)

    def _fresh(self) -> list[Worker]:
        now = self._clock()
        for name in [n for n, w in self._workers.items() if now - w.seen > self._stale_after_s]:
            del self._workers[name]  # silent for three intervals: dead (JetStream redelivers its items)
        return list(self._workers.values())

    def all(self) -> list[Worker]:
        return sorted(self._fresh(), key=lambda w: w.name)

    def healthy(self) -> list[Worker]:
        return [w for w in self.all() if w.heartbeat.ready]

    def serving(self, bundle: str, pool: str | None, profile: str | None) -> list[Worker]:
        """Healthy workers of a bundle, in a pool and on a machine profile when those are given."""
        found = []
        for worker in self.healthy():
            beat = worker.heartbeat
            if beat.bundle.lower() != bundle.lower():
                continue
            if pool is not None and beat.pool_name != pool:
                continue
            if profile is not None and beat.machine_profile.lower() != profile.lower():
                continue
            found.append(worker)
        return found

    def profiles(self) -> list[str]:
        return sorted({w.heartbeat.machine_profile for w in self.healthy()})

    def announced_profiles(self) -> set[str]:
        """Every profile a live worker announced, ready or not: what a metric label may name."""
        return {w.heartbeat.machine_profile for w in self.all()}
