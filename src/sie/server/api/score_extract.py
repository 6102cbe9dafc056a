"""``POST /v1/score/{model}`` and ``/v1/extract/{model}``.

Score ranks items against a query (cross-encoders score pairs; embedding models take
``options.score_mode``); the body carries ``usage`` and no ``timing``, as the public server's does.
Extract validates its body exactly as the public server does; extraction adapters arrive later.
"""

from __future__ import annotations

from typing import Final

from fastapi import Request, Response

from sie.engine.errors import InvalidInput, require_items
from sie.server.api.native import PostRoute, engine_of, model_of, negotiated, read_body, timing_headers
from sie.wire.requests import ExtractRequest, ScoreRequest
from sie.wire.responses import ScoreResponse, Usage

_EXTRACT_HINT: Final = (
    "does not support extraction. Use an extraction model like GLiNER, GLiClass, or Florence-2."
)


async def score(request: Request) -> Response:
    """Rerank ``items`` against ``query``: every item scored, best first, ``rank`` 0 the best."""
    model, engine = model_of(request), engine_of(request)
    engine.entry(model)
    body = await read_body(request, ScoreRequest)
    outcome = await engine.score(model, body.query, body.items, body.options, body.instruction)
    response = ScoreResponse(outcome.model, body.query.id, outcome.scores, Usage(outcome.tokens))
    return await negotiated(request, response, timing_headers(outcome.timing), 0)


async def extract(request: Request) -> Response:
    """Entities, relations, classes or structured data from each item."""
    model = model_of(request)
    entry = engine_of(request).entry(model)
    body = await read_body(request, ExtractRequest)
    require_items(body.items)
    if entry.config.tasks.extract is None:
        raise InvalidInput(f"Model '{model}' {_EXTRACT_HINT}")
    raise InvalidInput(f"Model '{model}' declares extract, but no extract adapter is available in this build")


ROUTES = (
    PostRoute("/v1/score/{model:model_id}", score, ("score",), ScoreRequest, ScoreResponse),
    PostRoute("/v1/extract/{model:model_id}", extract, ("extract",), ExtractRequest, None),
)
