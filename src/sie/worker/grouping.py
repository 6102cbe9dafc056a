"""One engine call for the items of a request that arrive together, split back into one answer each.

A gateway publishes one work item per item, and a pull delivers a request's items in one burst. Run
one by one, each paid a whole request's way through the engine (admission, plan, a cross-thread
future, timing and response building): 1.2-1.5 ms of worker CPU per item against the standalone
server's 0.6-0.8 for the same items in one request (docs/benchmarks.md, "The host path per item").
Here the encode items that reach ``encode`` in one turn of the event loop with the same model,
request and parameters are sent as one request when the loop next runs; each caller gets an answer
of its own, with its own item, its own token count and the group's timing, as a one-item request
would have had it. Anything the group's call raises is not taken as every item's fate: each item of
that group then runs alone, so a refusal or an error reaches exactly the items it concerns.

Only text items are grouped (images, audio and documents are sent on their own, as before): their
usage is their tokens alone, which the engine reports per item (``Answer.item_tokens``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

import msgspec

from sie.engine.ops.parts import Answer
from sie.wire.requests import EncodeRequest
from sie.wire.responses import EncodeResponse, Usage

MAX_GROUP: Final = 64  # items per grouped call; a larger burst is split into several

Encode = Callable[[str, EncodeRequest], Awaitable[Answer[EncodeResponse]]]


@dataclass
class _Group:
    model: str
    requests: list[EncodeRequest] = field(default_factory=list)
    waiting: list[asyncio.Future[Answer[EncodeResponse]]] = field(default_factory=list)


def groupable(request: EncodeRequest) -> bool:
    """A one-item request whose item is text only."""
    if len(request.items) != 1:
        return False
    item = request.items[0]
    return item.images is None and item.audio is None and item.video is None and item.document is None


class EncodeGroups:
    def __init__(self, encode: Encode) -> None:
        self._encode = encode
        self._open: dict[tuple[str, str, bytes], _Group] = {}
        self._running: set[asyncio.Task[None]] = set()

    def encode(
        self, model: str, request: EncodeRequest, request_id: str
    ) -> Awaitable[Answer[EncodeResponse]]:
        """The answer to ``request`` (one text item), from a call it may share with the items of the
        same ``request_id`` that arrive in this turn of the loop."""
        if not groupable(request):
            return self._encode(model, request)
        loop = asyncio.get_running_loop()
        key = (model, request_id, msgspec.msgpack.encode(request.params))
        group = self._open.get(key)
        if group is None or len(group.requests) >= MAX_GROUP:
            group = self._open[key] = _Group(model)
            loop.call_soon(self._launch, key, group)
        future: asyncio.Future[Answer[EncodeResponse]] = loop.create_future()
        group.requests.append(request)
        group.waiting.append(future)
        return future

    def _launch(self, key: tuple[str, str, bytes], group: _Group) -> None:
        if self._open.get(key) is group:
            del self._open[key]
        task = asyncio.create_task(self._run(group))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _run(self, group: _Group) -> None:
        if len(group.requests) == 1:
            await self._alone(group.model, group.requests[0], group.waiting[0])
            return
        first = group.requests[0]
        together = EncodeRequest(items=[r.items[0] for r in group.requests], params=first.params)
        try:
            answer = await self._encode(group.model, together)
        except Exception:
            await asyncio.gather(
                *(self._alone(group.model, r, f) for r, f in zip(group.requests, group.waiting, strict=True))
            )
            return
        for index, future in enumerate(group.waiting):
            if not future.done():
                future.set_result(_one_of(answer, index))

    async def _alone(
        self, model: str, request: EncodeRequest, future: asyncio.Future[Answer[EncodeResponse]]
    ) -> None:
        try:
            answer = await self._encode(model, request)
        except Exception as exc:
            if not future.done():
                future.set_exception(exc)
            return
        if not future.done():
            future.set_result(answer)


def _one_of(answer: Answer[EncodeResponse], index: int) -> Answer[EncodeResponse]:
    """Item ``index`` of a grouped answer, as its own one-item request would have been answered."""
    response = answer.response
    tokens = answer.item_tokens[index]
    usage = response.usage
    own = None if usage is None else Usage(tokens, None if usage.images is None else 0)
    item = EncodeResponse(response.model, [response.items[index]], response.timing, own)
    return Answer(item, answer.timing, tokens, (tokens,))
