"""What every native route shares: the engine, body decoding and response encoding."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Final, TypeVar

from fastapi import Depends, Request, Response
from starlette.concurrency import run_in_threadpool

from sie.engine.engine import Engine
from sie.wire import codec

T = TypeVar("T")


def engine_of(request: Request) -> Engine:
    engine: Engine = request.state.engine
    return engine


def model_of(request: Request) -> str:
    model: str = request.path_params["model"]
    return model


async def get_engine(request: Request) -> Engine:
    """Async on purpose: FastAPI runs a plain ``def`` dependency on its thread pool, a thread hop per
    request that on a CPU server also wakes a thread beside the forward pass's OpenMP threads."""
    return engine_of(request)


EngineDep = Annotated[Engine, Depends(get_engine)]


async def read_body(request: Request, into: type[T]) -> T:
    """The body as ``into``, once its item count passed (``Admission.count``: before any decoding)."""
    body = await request.body()
    content_type = request.headers.get("content-type")
    engine_of(request).admission.count(body, content_type)
    return codec.decode(body, content_type, into)


# Above this many output values a response is encoded on a worker thread, so a big answer (JSON floats
# especially) never stalls the event loop that admits other requests; below it the hop costs more.
OFFLOAD_VALUES: Final = 16_384


async def render_off_loop_if_big(
    values: int, render: Callable[..., bytes], *args: Any, **kwargs: Any
) -> bytes:
    """``render(*args, **kwargs)``, on a worker thread when the answer holds more than ``OFFLOAD_VALUES``."""
    if values > OFFLOAD_VALUES:
        return await run_in_threadpool(render, *args, **kwargs)
    return render(*args, **kwargs)


async def negotiated(request: Request, value: Any, headers: dict[str, str], values: int) -> Response:
    as_json = codec.wants_json(request.headers.get("accept"))
    body = await render_off_loop_if_big(values, codec.encode, value, as_json=as_json)
    return Response(body, media_type=codec.media_type(as_json=as_json), headers=headers)
