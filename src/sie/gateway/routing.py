"""Where a request goes: its bundle, pool and machine profile, or why it cannot go anywhere yet.

A model path ``bundle:/org/model`` pins the bundle (``bundle_for``); otherwise it is the first bundle,
by priority, that serves the model.

A request names a machine profile with ``X-SIE-MACHINE-PROFILE`` (``pool/profile`` names a pool too)
and a pool with ``X-SIE-Pool``; what it leaves open is taken from a healthy worker of the model's
bundle, so an unconfigured gateway and worker meet on the ``default`` lane. No healthy worker for the
lane means scale from zero: the caller is told to come back (``Provisioning``) and the demand is
recorded for the autoscaler. With ``SIE_GATEWAY_CONFIGURED_GPUS`` a profile outside the list is
refused; a listed one is matched case-insensitively (``l4`` also finds ``l4-spot``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

from sie.catalog.bundles import Bundle
from sie.catalog.catalog import CatalogEntry
from sie.gateway.errors import BundleConflict, GpuNotConfigured, Provisioning
from sie.gateway.metrics import OTHER, ProfileLabel
from sie.gateway.workers import WorkerTable
from sie.queue.contract import DEFAULT_LANE_TOKEN, Lane

DEMAND_TTL_S: Final = 120.0
MAX_DEMAND_KEYS: Final = 256


class Demand:
    """Lanes asked for while no worker served them: ``sie_gateway_pending_demand``, which an
    autoscaler (KEDA) reads to start the first worker. An entry lapses ``DEMAND_TTL_S`` after its
    last request, and is dropped once a healthy worker serves its profile and bundle."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._since: dict[tuple[str, str, str], float] = {}

    def record(self, pool: str, profile: str, bundle: str) -> None:
        """Keys are labels the operator made (``Router.route``); ``MAX_KEYS`` bounds them regardless."""
        key = (pool, profile, bundle)
        if key not in self._since and len(self._since) >= MAX_DEMAND_KEYS:
            del self._since[min(self._since, key=self._since.__getitem__)]  # the stalest goes
        self._since[key] = self._clock()

    def pending(self, workers: WorkerTable) -> dict[tuple[str, str, str], float]:
        """``(pool, machine_profile, bundle) -> 1`` for each lane still waiting ("" where unnamed)."""
        now = self._clock()
        for key in list(self._since):
            pool, profile, bundle = key
            served = workers.serving(bundle, pool or None, profile or None)
            if now - self._since[key] > DEMAND_TTL_S or served:
                del self._since[key]
        return {key: 1.0 for key in self._since}


def bundle_for(entry: CatalogEntry, bundles: list[Bundle], pinned: str | None = None) -> str:
    """The bundle a model's items go to: the first of ``bundles`` (ordered by ``by_priority``) that
    serves it, else ``default``. A ``bundle:/org/model`` path pins one (``pinned``, any case): it
    must serve the model (``BundleConflict`` lists those that do), unless the gateway knows no
    bundles at all, where the pin is taken as it is (the public gateway's rule)."""
    serving = [bundle.name for bundle in bundles if bundle.serves(entry)]
    if pinned is None:
        return serving[0] if serving else DEFAULT_LANE_TOKEN
    if not bundles:
        return pinned
    found = next((name for name in serving if name.lower() == pinned.lower()), None)
    if found is None:
        raise BundleConflict(entry.name, pinned, serving)
    return found


def by_priority(bundles: list[Bundle]) -> list[Bundle]:
    """Lowest priority number first, ties by name (the public gateway's order); sorted once at start."""
    return sorted(bundles, key=lambda b: (b.priority, b.name))


def requested(profile_header: str | None, pool_header: str | None) -> tuple[str | None, str | None]:
    """The pool and profile a request's headers name (``X-SIE-MACHINE-PROFILE: pool/profile`` names
    both; ``X-SIE-Pool`` wins for the pool)."""
    pool, profile = pool_header or None, None
    if profile_header:
        head, _, tail = profile_header.partition("/")
        if tail:
            pool, profile = pool or head, tail
        else:
            profile = head
    return pool, profile


class Router:
    def __init__(
        self, workers: WorkerTable, demand: Demand, configured_gpus: list[str], provisioning_wait_s: int = 120
    ) -> None:
        self._workers = workers
        self._demand = demand
        self._configured = configured_gpus
        self._wait_s = provisioning_wait_s
        self.profile_label = ProfileLabel(configured_gpus, workers)

    def canonical_profile(self, profile: str) -> str:
        if not self._configured:
            return profile
        found = self.profile_label.configured(profile)
        if found is None:
            raise GpuNotConfigured(profile, self._configured)
        return found

    def route(
        self, bundle: str, profile_header: str | None, pool_header: str | None, *, pool_known: bool = True
    ) -> Lane:
        """The lane of a request's headers. Demand is recorded only under labels the operator made:
        a pool that exists (``pool_known``) and a configured or live profile, else ``other``."""
        pool, profile = requested(profile_header, pool_header)
        if profile is not None:
            profile = self.canonical_profile(profile)
        serving = self._workers.serving(bundle, pool, profile)
        if not serving:
            pool_label = (pool if pool_known else OTHER) if pool else ""
            self._demand.record(pool_label, self.profile_label(profile), bundle)
            raise Provisioning(pool, profile, bundle, self._wait_s)
        beat = serving[0].heartbeat  # its spelling of the profile: subjects are case-sensitive
        return Lane(beat.pool_name, beat.machine_profile, beat.bundle)
