"""``POST /v1/encode/{model}``: embeddings in msgpack (default) or JSON."""

from __future__ import annotations

from fastapi import Request, Response

from sie.server.api.native import (
    PostRoute,
    check_text_sizes,
    engine_of,
    model_of,
    negotiated,
    read_body,
    timing_headers,
)
from sie.wire.requests import EncodeRequest
from sie.wire.responses import EncodeResponse


async def encode(request: Request) -> Response:
    """Dense embeddings for each item; one result per item, in order, ``id`` echoed when given."""
    model, engine = model_of(request), engine_of(request)
    engine.entry(model)
    body = await read_body(request, EncodeRequest)
    check_text_sizes(body.items, request.state.max_item_text_bytes)
    outcome = await engine.encode(model, body.items, body.params)
    response = EncodeResponse(model=outcome.model, items=outcome.items, timing=outcome.timing)
    values = sum(item.dense.values.size for item in outcome.items if item.dense is not None)
    return await negotiated(request, response, timing_headers(outcome.timing), values)


ROUTES = (PostRoute("/v1/encode/{model:model_id}", encode, ("encode",), EncodeRequest, EncodeResponse),)
