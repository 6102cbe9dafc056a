"""A request's encode items that reach the worker together run as one engine call, and each still
gets the answer a one-item request would have had: its own vector, id and token count; a failure
in the group reaches only the item it concerns. Real engine (all-MiniLM-L6-v2, float32)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import numpy as np
import pytest

from sie.catalog.errors import InvalidInput
from sie.engine.engine import Engine
from sie.engine.ops.parts import Answer
from sie.wire.requests import EncodeParams, EncodeRequest, ImageInput, Item
from sie.wire.responses import EncodeResponse
from sie.worker.grouping import EncodeGroups, groupable

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
TEXTS = [f"the {n} item of a request sent through the queue" for n in range(6)] + ["a much longer " * 20]


def one(text: str | None, index: int, params: EncodeParams | None = None) -> EncodeRequest:
    return EncodeRequest(items=[Item(id=f"i{index}", text=text)], params=params or EncodeParams())


class Counting:
    """The engine's encode, counting the calls and the items each carried."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.calls: list[int] = []

    def __call__(self, model: str, request: EncodeRequest) -> Awaitable[Answer[EncodeResponse]]:
        self.calls.append(len(request.items))
        return self.engine.encode(model, request)


async def test_items_arriving_together_run_as_one_call_and_answer_as_alone(engine: Engine) -> None:
    counting = Counting(engine)
    groups = EncodeGroups(counting)
    answers = await asyncio.gather(*(groups.encode(MINILM, one(t, i), "r1") for i, t in enumerate(TEXTS)))
    assert counting.calls == [len(TEXTS)]
    alone = [await engine.encode(MINILM, one(t, i)) for i, t in enumerate(TEXTS)]
    for got, want in zip(answers, alone, strict=True):
        [item], [expected] = got.response.items, want.response.items
        assert item.id == expected.id
        assert item.dense is not None and expected.dense is not None
        np.testing.assert_allclose(item.dense.values, expected.dense.values, atol=1e-5)
        assert got.response.usage == want.response.usage  # the item's own tokens, not the group's
        assert got.tokens == want.tokens and got.item_tokens == (want.tokens,)
    assert len({a.tokens for a in answers}) > 1  # the long text bills more than the short ones


async def test_other_requests_parameters_and_media_are_not_mixed(engine: Engine) -> None:
    counting = Counting(engine)
    groups = EncodeGroups(counting)
    query = EncodeParams(options={"is_query": True})
    calls = [
        groups.encode(MINILM, one("a", 0), "r1"),
        groups.encode(MINILM, one("b", 1), "r2"),
        groups.encode(MINILM, one("c", 2), "r1"),
        groups.encode(MINILM, one("d", 3, query), "r1"),
    ]
    await asyncio.gather(*calls)
    assert sorted(counting.calls) == [1, 1, 2]  # r1 plain (a, c), r2, r1 as queries
    image = EncodeRequest(items=[Item(text="x", images=[ImageInput(data=b"\x89PNG")])])
    assert not groupable(image) and groupable(one("x", 0))


async def test_a_failure_in_a_group_reaches_only_its_item(engine: Engine) -> None:
    counting = Counting(engine)
    groups = EncodeGroups(counting)
    calls = [groups.encode(MINILM, one(t, i), "r1") for i, t in enumerate(["fine", None, "also fine"])]
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert isinstance(results[1], InvalidInput)
    assert all(isinstance(r, Answer) for r in (results[0], results[2]))
    assert counting.calls == [3, 1, 1, 1]  # the group, then each item alone
    with pytest.raises(InvalidInput):
        await groups.encode(MINILM, one(None, 9), "r2")  # alone from the start: raised as it was
