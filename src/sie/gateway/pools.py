"""Resource pools with leases, kept in a JetStream key-value bucket so every gateway sees the same ones.

A pool is a named reservation: ``gpus`` (machine profile -> workers wanted for it to be ``active``),
optional ``gpu_caps``, ``bundle`` and ``minimum_worker_count``, and the queue namespace that serves it
(``queue_pool``: ``default`` unless given, so a pool draws on the base capacity; a named one needs
workers started with that ``SIE_POOL``). A lease lasts ``ttl_seconds`` (1200) past its last renewal;
an expired pool reads ``expired`` and is deleted by the next sweep of any gateway. ``default`` always
exists and cannot be deleted.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any, Final

import msgspec
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import APIError, BadRequestError, KeyNotFoundError, KeyWrongLastSequenceError, NoKeysError
from nats.js.kv import KeyValue

from sie.gateway.workers import WorkerTable
from sie.http.auth import OPEN, Principal
from sie.http.errors import Forbidden
from sie.queue.contract import DEFAULT_LANE_TOKEN
from sie.queue.streams import ensure_replicas

BUCKET: Final = "sie_pools"
DEFAULT_POOL: Final = DEFAULT_LANE_TOKEN
DEFAULT_TTL_S: Final = 1200
_NAME: Final = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
_PROFILE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
MAX_POOLS: Final = 256  # pools are labels of the gateway's metrics: never a caller's to multiply
MAX_PROFILES: Final = 16


class PoolError(ValueError):
    """A pool request the API refuses (400), with the reason."""


class PoolForbidden(Forbidden):
    """A pool another token owns: only its owner and the admin change it."""

    def __init__(self, name: str) -> None:
        super().__init__(f"Pool '{name}' belongs to another token")


class PoolSpec(msgspec.Struct, omit_defaults=True):
    name: str
    gpus: dict[str, int] = {}
    gpu_caps: dict[str, int] | None = None
    bundle: str | None = None
    ttl_seconds: int | None = None
    minimum_worker_count: int = 0
    pinned_models: list[str] | None = None
    queue_pool: str = DEFAULT_POOL


class PoolRecord(msgspec.Struct):
    spec: PoolSpec
    created_at: float
    last_renewed: float
    owner: str | None = None  # the creating pool token's hash (``sie.http.auth.owner_of``); None: anyone's


def parse_spec(body: bytes, configured_gpus: list[str]) -> PoolSpec:
    try:
        spec = msgspec.json.decode(body, type=PoolSpec)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise PoolError(f"Invalid pool: {exc}") from None
    name = spec.name.lower()
    if not _NAME.match(name):
        raise PoolError(
            f"Invalid pool name '{spec.name}': lowercase letters, digits, '-' and '_', at most 63"
        )
    profiles = [*spec.gpus, *(spec.gpu_caps or {})]
    if len(profiles) > 2 * MAX_PROFILES or not all(_PROFILE.match(p) for p in profiles):
        raise PoolError(f"Pool gpus name at most {MAX_PROFILES} machine profiles, each a plain name")
    if any(count < 0 for count in spec.gpus.values()) or spec.minimum_worker_count < 0:
        raise PoolError("Pool counts must be >= 0")
    if spec.ttl_seconds is not None and spec.ttl_seconds <= 0:
        raise PoolError("ttl_seconds must be > 0")
    if configured_gpus:
        known = {g.lower() for g in configured_gpus}
        unknown = sorted(p for p in spec.gpus if p.lower() not in known)
        if unknown:
            raise PoolError(
                f"Unknown machine profile(s) {', '.join(unknown)}; configured: {', '.join(configured_gpus)}"
            )
    queue_pool = spec.queue_pool.lower()
    if not _NAME.match(queue_pool):
        raise PoolError(f"Invalid queue_pool '{spec.queue_pool}'")
    return msgspec.structs.replace(spec, name=name, queue_pool=queue_pool)


# Conditional writes retried by a renewal that lost a race to another writer.
RENEW_ATTEMPTS: Final = 3
# JetStream's "wrong last sequence" error codes: a conditional write over a revision that is gone.
WRONG_LAST_REVISION: Final = (10071, 10164)


class Pools:
    def __init__(
        self,
        jetstream: JetStreamContext,
        workers: WorkerTable,
        clock: Callable[[], float] = time.time,
        replicas: int = 1,
    ) -> None:
        self._jetstream = jetstream
        self._replicas = replicas
        self._workers = workers
        self._clock = clock
        self._kv: KeyValue | None = None

    async def start(self) -> None:
        """Create the bucket, or join the one there (a bucket made with other options refuses the create:
        it is used as it is, with at least this gateway's copies)."""
        config = KeyValueConfig(bucket=BUCKET, history=1, storage=StorageType.FILE, replicas=self._replicas)
        try:
            self._kv = await self._jetstream.create_key_value(config)
        except BadRequestError:
            self._kv = await self._jetstream.key_value(BUCKET)
            info = await self._jetstream.stream_info(f"KV_{BUCKET}")
            await ensure_replicas(self._jetstream, info.config, self._replicas)

    @property
    def kv(self) -> KeyValue:
        assert self._kv is not None, "Pools.start() first"
        return self._kv

    async def _read(self, name: str) -> PoolRecord | None:
        found = await self._entry(name)
        return found[0] if found else None

    async def _entry(self, name: str) -> tuple[PoolRecord, int] | None:
        """The pool's record and its revision in the bucket, which a write names to be conditional."""
        try:
            entry = await self.kv.get(name)
        except KeyNotFoundError:
            return None
        if not entry.value or entry.revision is None:
            return None
        return msgspec.json.decode(entry.value, type=PoolRecord), entry.revision

    async def create(self, spec: PoolSpec, principal: Principal = OPEN) -> dict[str, Any]:
        """Create, or update and renew: posting a pool again is how a client changes it (its owner
        or the admin only). A pool token's pool is owned by it; the admin's and an open gateway's by none."""
        now = self._clock()
        existing = await self._read(spec.name) if spec.name != DEFAULT_POOL else None
        if existing is not None and not principal.may_manage(existing.owner):
            raise PoolForbidden(spec.name)
        if existing is None and spec.name != DEFAULT_POOL and len(await self.names()) >= MAX_POOLS:
            raise PoolError(f"At most {MAX_POOLS} pools; delete one first")
        owner = existing.owner if existing is not None else (None if principal.admin else principal.owner)
        record = PoolRecord(spec, existing.created_at if existing else now, now, owner)
        if spec.name != DEFAULT_POOL:
            await self.kv.put(spec.name, msgspec.json.encode(record))
        return self.view(record)

    async def get(self, name: str) -> dict[str, Any] | None:
        name = name.lower()
        if name == DEFAULT_POOL:
            return self.view(self._default())
        record = await self._read(name)
        return self.view(record) if record is not None else None

    async def record(self, name: str) -> PoolRecord | None:
        name = name.lower()
        return self._default() if name == DEFAULT_POOL else await self._read(name)

    async def renew(self, name: str, principal: Principal = OPEN) -> bool:
        name = name.lower()
        if name == DEFAULT_POOL:
            return True
        # Written only over the revision read: a delete (or a sweep) between the read and the write
        # would otherwise be undone, bringing a deleted pool back (an SDK renews in the background).
        for _ in range(RENEW_ATTEMPTS):
            found = await self._entry(name)
            if found is None:
                return False
            record, revision = found
            if not principal.may_manage(record.owner):
                raise PoolForbidden(name)
            record.last_renewed = self._clock()
            try:
                await self.kv.update(name, msgspec.json.encode(record), last=revision)
            except KeyWrongLastSequenceError:
                continue  # changed meanwhile (renewed elsewhere, updated or deleted): read it again
            return True
        return await self._read(name) is not None  # others kept renewing it

    async def delete(self, name: str, principal: Principal = OPEN) -> bool:
        record = await self._read(name.lower())
        if record is None:
            return False
        if not principal.may_manage(record.owner):
            raise PoolForbidden(name)
        await self.kv.delete(name.lower())
        return True

    async def names(self) -> list[str]:
        try:
            return sorted(await self.kv.keys())
        except NoKeysError:
            return []

    async def all(self) -> list[dict[str, Any]]:
        views = [self.view(self._default())]
        for name in await self.names():
            record = await self._read(name)
            if record is not None:
                views.append(self.view(record))
        return views

    async def sweep(self) -> list[str]:
        """Delete the pools whose lease lapsed; any gateway may do it, deleting twice is harmless."""
        expired = []
        for name in await self.names():
            found = await self._entry(name)
            if found is None or not self._expired(found[0]):
                continue
            try:  # only the revision judged expired: a renewal since keeps the pool
                await self.kv.delete(name, last=found[1])
            except APIError as exc:
                if exc.err_code not in WRONG_LAST_REVISION:
                    raise
                continue
            expired.append(name)
        return expired

    def _default(self) -> PoolRecord:
        return PoolRecord(PoolSpec(DEFAULT_POOL), 0.0, self._clock())

    def _expired(self, record: PoolRecord) -> bool:
        if record.spec.name == DEFAULT_POOL:
            return False
        ttl = record.spec.ttl_seconds or DEFAULT_TTL_S
        return self._clock() > record.last_renewed + ttl

    def assigned(self, spec: PoolSpec) -> list[dict[str, Any]]:
        """The healthy workers of the pool's queue namespace that count toward it (its bundle, its
        profiles, at most ``gpu_caps`` of a profile)."""
        taken: dict[str, int] = {}
        chosen = []
        for worker in self._workers.healthy():
            beat = worker.heartbeat
            if beat.pool_name != spec.queue_pool or (spec.bundle and beat.bundle != spec.bundle):
                continue
            profile = beat.machine_profile.lower()
            wanted = {p.lower(): n for p, n in spec.gpus.items()}
            if wanted and profile not in wanted:
                continue
            caps = {p.lower(): n for p, n in (spec.gpu_caps or {}).items()}
            if profile in caps and taken.get(profile, 0) >= caps[profile]:
                continue
            taken[profile] = taken.get(profile, 0) + 1
            chosen.append({"name": beat.name, "url": "", "gpu": beat.machine_profile})
        return chosen

    def view(self, record: PoolRecord) -> dict[str, Any]:
        spec = record.spec
        assigned = self.assigned(spec)
        if self._expired(record):
            state = "expired"
        else:
            counts: dict[str, int] = {}
            for worker in assigned:
                counts[worker["gpu"].lower()] = counts.get(worker["gpu"].lower(), 0) + 1
            met = all(counts.get(p.lower(), 0) >= n for p, n in spec.gpus.items())
            enough = len(assigned) >= max(1, spec.minimum_worker_count)
            state = "active" if met and enough else "pending"
        spec_view = msgspec.to_builtins(spec)
        spec_view.setdefault("bundle", None)
        spec_view.setdefault("ttl_seconds", None)
        spec_view.setdefault("gpus", {})
        spec_view.setdefault("minimum_worker_count", 0)
        return {
            "name": spec.name,
            "spec": spec_view,
            "status": {
                "state": state,
                "assigned_workers": assigned,
                "created_at": record.created_at,
                "last_renewed": record.last_renewed,
            },
        }

    def leased_gpus(self, views: list[dict[str, Any]]) -> dict[tuple[str, str], int]:
        """``sie_gateway_active_lease_gpus``: GPUs held by active named pools, by profile and bundle."""
        held: dict[tuple[str, str], int] = {}
        for view in views:
            spec = view["spec"]
            if spec["name"] == DEFAULT_POOL or view["status"]["state"] != "active":
                continue
            for profile, count in spec["gpus"].items():
                key = (profile, spec["bundle"] or DEFAULT_POOL)
                held[key] = held.get(key, 0) + count
        return held
