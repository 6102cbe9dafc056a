"""``POST /v1/score/{model}`` and ``/v1/extract/{model}``.

Score ranks items against a query (cross-encoders score pairs; embedding models take
``options.score_mode``); the body carries ``usage`` and no ``timing``, as the public server's does.
Extract returns, for every item, the public result's six keys whichever the model's family fills.
"""

from __future__ import annotations

from fastapi import Request, Response

from sie.http.parts import model_path, timing_headers, usage_headers
from sie.http.routes import PostRoute
from sie.server.api.native import engine_of, model_of, negotiated, read_body
from sie.server.remote import REMOTE_PARAM, check_remote_header, remote_header, router_of
from sie.wire.requests import ExtractRequest, ScoreRequest
from sie.wire.responses import ExtractResponse, ScoreResponse


async def score(request: Request) -> Response:
    """Rerank ``items`` against ``query``: every item scored, best first, ``rank`` 0 the best."""
    model, router = model_of(request), router_of(request)
    router.engine.require(model)
    routed = await router.score(model, await read_body(request, ScoreRequest), remote_header(request))
    answer = routed.answer
    headers = timing_headers(answer.timing) | usage_headers(answer.response.usage) | dict(routed.headers)
    return await negotiated(request, answer.response, headers, 0)


async def extract(request: Request) -> Response:
    """Entities, relations, classes or structured data from each item."""
    model, engine = model_of(request), engine_of(request)
    engine.require(model)
    check_remote_header(request)
    answer = await engine.extract(model, await read_body(request, ExtractRequest))
    headers = timing_headers(answer.timing) | usage_headers(answer.response.usage)
    return await negotiated(request, answer.response, headers, 0)


ROUTES = (
    PostRoute(
        model_path("/v1/score"), score, ("score",), ScoreRequest, ScoreResponse, headers=(REMOTE_PARAM,)
    ),
    PostRoute(
        model_path("/v1/extract"),
        extract,
        ("extract",),
        ExtractRequest,
        ExtractResponse,
        headers=(REMOTE_PARAM,),
    ),
)
