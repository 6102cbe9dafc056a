"""What every native route shares: the engine dependency, body decoding and response encoding."""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request, Response

from sie import __version__
from sie.engine.engine import Engine
from sie.server.errors import PayloadTooLarge
from sie.wire import codec
from sie.wire.requests import Item
from sie.wire.responses import Timing

T = TypeVar("T")


def get_engine(request: Request) -> Engine:
    engine: Engine = request.state.engine
    return engine


EngineDep = Annotated[Engine, Depends(get_engine)]


async def read_body(request: Request, into: type[T]) -> T:
    body = await request.body()
    return codec.decode(body, request.headers.get("content-type"), into)


def check_text_sizes(items: list[Item], limit: int) -> None:
    for index, item in enumerate(items):
        if item.text is not None and len(item.text) * 4 > limit and len(item.text.encode()) > limit:
            raise PayloadTooLarge(
                f"Item {index} text exceeds the limit of {limit} bytes (SIE_MAX_ITEM_TEXT_BYTES)"
            )


def timing_headers(timing: Timing) -> dict[str, str]:
    headers = {
        "X-SIE-Server-Version": __version__,
        "X-Queue-Time": f"{timing.queue_ms:.2f}",
        "X-Tokenization-Time": f"{timing.tokenization_ms:.2f}",
        "X-Inference-Time": f"{timing.inference_ms:.2f}",
        "X-Total-Time": f"{timing.total_ms:.2f}",
        "X-SIE-Served-By": "local",
    }
    if timing.postprocessing_ms is not None:
        headers["X-Postprocessing-Time"] = f"{timing.postprocessing_ms:.2f}"
    return headers


def negotiated(request: Request, value: Any, headers: dict[str, str]) -> Response:
    as_json = codec.wants_json(request.headers.get("accept"))
    return Response(
        codec.encode(value, as_json=as_json), media_type=codec.media_type(as_json=as_json), headers=headers
    )
