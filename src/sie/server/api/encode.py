"""``POST /v1/encode/{model}``: embeddings in msgpack (default) or JSON."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from sie.server.api.native import EngineDep, check_text_sizes, negotiated, read_body, timing_headers
from sie.server.openapi_docs import native_body
from sie.wire.requests import EncodeRequest
from sie.wire.responses import EncodeResponse

router = APIRouter(tags=["encode"])


@router.post("/v1/encode/{model:path}", openapi_extra=native_body(EncodeRequest, EncodeResponse))
async def encode(model: str, request: Request, engine: EngineDep) -> Response:
    """Dense embeddings for each item; one result per item, in order, ``id`` echoed when given."""
    engine.entry(model)
    body = await read_body(request, EncodeRequest)
    check_text_sizes(body.items, request.state.max_item_text_bytes)
    outcome = await engine.encode(model, body.items, body.params)
    response = EncodeResponse(model=outcome.model, items=outcome.items, timing=outcome.timing)
    values = sum(item.dense.values.size for item in outcome.items if item.dense is not None)
    return await negotiated(request, response, timing_headers(outcome.timing), values)
