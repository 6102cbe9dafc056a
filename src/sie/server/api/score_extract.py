"""``POST /v1/score/{model}`` and ``/v1/extract/{model}``.

The bodies are validated exactly as the public server does; models without the task answer 400
with the public hint. Rerankers and extractors arrive with their adapters in later work.
"""

from __future__ import annotations

from typing import Final

from fastapi import Request, Response

from sie.engine.errors import InvalidInput, require_items
from sie.server.api.native import PostRoute, engine_of, model_of, read_body
from sie.wire.requests import ExtractRequest, ScoreRequest

_SCORE_HINT: Final = (
    "does not support scoring. Use an encoder model with /v1/encode instead, or use a reranker model."
)
_EXTRACT_HINT: Final = (
    "does not support extraction. Use an extraction model like GLiNER, GLiClass, or Florence-2."
)


async def _validated(
    request: Request, into: type[ScoreRequest | ExtractRequest], task: str, hint: str
) -> Response:
    """Validate exactly as the public server does, then refuse: no adapter here serves this task yet."""
    model = model_of(request)
    entry = engine_of(request).entry(model)
    body = await read_body(request, into)
    require_items(body.items)
    if getattr(entry.config.tasks, task) is None:
        raise InvalidInput(f"Model '{model}' {hint}")
    raise InvalidInput(f"Model '{model}' declares {task}, but no {task} adapter is available in this build")


async def score(request: Request) -> Response:
    """Rerank ``items`` against ``query``."""
    return await _validated(request, ScoreRequest, "score", _SCORE_HINT)


async def extract(request: Request) -> Response:
    """Entities, relations, classes or structured data from each item."""
    return await _validated(request, ExtractRequest, "extract", _EXTRACT_HINT)


ROUTES = (
    PostRoute("/v1/score/{model:model_id}", score, ("score",), ScoreRequest, None),
    PostRoute("/v1/extract/{model:model_id}", extract, ("extract",), ExtractRequest, None),
)
