"""The pool registry over a real nats-server (its key-value bucket): a renewal racing a delete or a
sweep never brings a deleted pool back, and a sweep never deletes a pool renewed since it looked."""

from __future__ import annotations

import asyncio

import nats

from sie.gateway.pools import Pools, PoolSpec
from sie.gateway.workers import WorkerTable


async def test_renewals_racing_deletes_never_bring_a_pool_back(nats_url: str) -> None:
    """The public SDK renews a pool's lease in the background, so a renewal may land while the
    client deletes the pool; before renewals were conditional on the revision they read, one that
    read the pool before the delete wrote it back after (seen as a pool still there after
    ``delete_pool`` in tests/e2e/test_cluster_capacity.py)."""
    client = await nats.connect(nats_url)
    try:
        pools = Pools(client.jetstream(), WorkerTable(stale_after_s=30))
        await pools.start()
        for round_ in range(40):
            await pools.create(PoolSpec(f"eval-{round_}", {"default": 1}, ttl_seconds=60))
            name = f"eval-{round_}"
            results = await asyncio.gather(*(pools.renew(name) for _ in range(4)), pools.delete(name))
            assert results[-1] is True
            assert await pools.get(name) is None, f"round {round_}: renewed back after its delete"
            assert await pools.renew(name) is False
    finally:
        await client.close()


async def test_a_sweep_never_deletes_a_pool_renewed_since_it_looked(nats_url: str) -> None:
    """A sweep deletes only the revision it judged lapsed: a pool renewed in between stays, and a
    renewal never reports success for a pool the sweep then deletes."""
    clock = [1000.0]
    client = await nats.connect(nats_url)
    try:
        pools = Pools(client.jetstream(), WorkerTable(stale_after_s=30), clock=lambda: clock[0])
        await pools.start()
        for round_ in range(40):
            name = f"eval-{round_}"
            await pools.create(PoolSpec(name, {"default": 1}, ttl_seconds=5))
            clock[0] += 10  # lapsed, unless renewed from now on
            swept, *renewed = await asyncio.gather(pools.sweep(), *(pools.renew(name) for _ in range(4)))
            gone = await pools.get(name) is None
            assert gone == (name in swept), f"round {round_}"
            assert not (gone and any(renewed)), f"round {round_}: a renewed pool was swept"
            if not gone:
                await pools.delete(name)
    finally:
        await client.close()
