"""``POST /v1/encode/{model}``: embeddings in msgpack (default) or JSON."""

from __future__ import annotations

from fastapi import Request, Response

from sie.http.parts import model_path, timing_headers, usage_headers
from sie.http.routes import PostRoute
from sie.server.api.native import model_of, negotiated, read_body
from sie.server.remote import REMOTE_PARAM, remote_header, router_of
from sie.wire.requests import EncodeRequest
from sie.wire.responses import EncodeResponse


async def encode(request: Request) -> Response:
    """Dense embeddings for each item; one result per item, in order, ``id`` echoed when given. A remote
    profile's come from its upstream (``server.remote``), and the headers say which served."""
    model, router = model_of(request), router_of(request)
    router.engine.require(model)
    body = await read_body(request, EncodeRequest)
    routed = await router.encode(model, body, remote_header(request))
    answer = routed.answer
    values = sum(item.dense.values.size for item in answer.response.items if item.dense is not None)
    headers = timing_headers(answer.timing) | usage_headers(answer.response.usage) | dict(routed.headers)
    return await negotiated(request, answer.response, headers, values)


ROUTES = (
    PostRoute(
        model_path("/v1/encode"), encode, ("encode",), EncodeRequest, EncodeResponse, headers=(REMOTE_PARAM,)
    ),
)
