"""Idempotency-Key: a duplicate arriving while the first request runs waits for it and replays its
answer, or gets its refusal; the same key with another body is refused; old keys leave the cache."""

from __future__ import annotations

import asyncio

import pytest

from sie.control.idempotency import Answer, Evicted, IdempotencyCache, KeyMismatch, OwnerFailed


def test_a_waiting_duplicate_replays_the_first_answer() -> None:
    async def scenario() -> Answer | None:
        cache = IdempotencyCache()
        assert await cache.claim("k", "h1") is None  # the first owns the key
        waiter = asyncio.create_task(cache.claim("k", "h1"))
        await asyncio.sleep(0)
        assert not waiter.done()
        with pytest.raises(KeyMismatch):
            await cache.claim("k", "h2")
        cache.finish("k", Answer(201, b"{}", "h1"))
        return await waiter

    assert asyncio.run(scenario()) == Answer(201, b"{}", "h1")


def test_a_waiting_duplicate_gets_the_first_refusal_or_is_told_it_was_cancelled() -> None:
    async def scenario() -> None:
        cache = IdempotencyCache()
        assert await cache.claim("k", "h") is None
        waiter = asyncio.create_task(cache.claim("k", "h"))
        await asyncio.sleep(0)
        cache.abandon("k", ValueError("conflict"))
        with pytest.raises(ValueError, match="conflict"):
            await waiter
        assert await cache.claim("k", "h") is None  # a failed key is free again
        waiter = asyncio.create_task(cache.claim("k", "h"))
        await asyncio.sleep(0)
        cache.abandon("k", asyncio.CancelledError())
        with pytest.raises(OwnerFailed):
            await waiter

    asyncio.run(scenario())


def test_the_oldest_keys_leave_the_cache() -> None:
    async def scenario() -> None:
        cache = IdempotencyCache(capacity=2)
        for key in ("a", "b", "c"):
            assert await cache.claim(key, "h") is None
            cache.finish(key, Answer(201, key.encode(), "h"))
        assert await cache.claim("a", "h") is None  # evicted: runs again
        assert (await cache.claim("c", "h")) == Answer(201, b"c", "h")
        waiter = asyncio.create_task(cache.claim("a", "h"))
        await asyncio.sleep(0)
        cache.finish("a", Answer(201, b"a", "h"))
        cache._answers.pop("a")  # evicted while the duplicate waited
        with pytest.raises(Evicted):
            await waiter

    asyncio.run(scenario())
