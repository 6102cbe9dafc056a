"""``POST /v1/encode/{model}``: embeddings in msgpack (default) or JSON."""

from __future__ import annotations

from fastapi import Request, Response

from sie.http.parts import model_path, timing_headers
from sie.http.routes import PostRoute
from sie.server.api.native import engine_of, model_of, negotiated, read_body
from sie.wire.requests import EncodeRequest
from sie.wire.responses import EncodeResponse


async def encode(request: Request) -> Response:
    """Dense embeddings for each item; one result per item, in order, ``id`` echoed when given."""
    model, engine = model_of(request), engine_of(request)
    engine.require(model)
    answer = await engine.encode(model, await read_body(request, EncodeRequest))
    values = sum(item.dense.values.size for item in answer.response.items if item.dense is not None)
    return await negotiated(request, answer.response, timing_headers(answer.timing), values)


ROUTES = (PostRoute(model_path("/v1/encode"), encode, ("encode",), EncodeRequest, EncodeResponse),)
