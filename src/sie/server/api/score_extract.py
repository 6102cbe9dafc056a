"""``POST /v1/score/{model}`` and ``/v1/extract/{model}``.

The bodies are validated exactly as the public server does; models without the task answer 400
with the public hint. Rerankers and extractors arrive with their adapters in later work.
"""

from __future__ import annotations

from typing import Final

from fastapi import APIRouter, Request, Response

from sie.engine.engine import Engine
from sie.engine.errors import InvalidInput, require_items
from sie.server.api.native import EngineDep, read_body
from sie.server.openapi_docs import native_body
from sie.wire.requests import ExtractRequest, ScoreRequest

router = APIRouter()


_SCORE_HINT: Final = (
    "does not support scoring. Use an encoder model with /v1/encode instead, or use a reranker model."
)
_EXTRACT_HINT: Final = (
    "does not support extraction. Use an extraction model like GLiNER, GLiClass, or Florence-2."
)


async def _validated(
    model: str,
    request: Request,
    engine: Engine,
    into: type[ScoreRequest | ExtractRequest],
    task: str,
    hint: str,
) -> Response:
    """Validate exactly as the public server does, then refuse: no adapter here serves this task yet."""
    entry = engine.entry(model)
    body = await read_body(request, into)
    require_items(body.items)
    if getattr(entry.config.tasks, task) is None:
        raise InvalidInput(f"Model '{model}' {hint}")
    raise InvalidInput(f"Model '{model}' declares {task}, but no {task} adapter is available in this build")


@router.post("/v1/score/{model:path}", tags=["score"], openapi_extra=native_body(ScoreRequest, None))
async def score(model: str, request: Request, engine: EngineDep) -> Response:
    """Rerank ``items`` against ``query``."""
    return await _validated(model, request, engine, ScoreRequest, "score", _SCORE_HINT)


@router.post("/v1/extract/{model:path}", tags=["extract"], openapi_extra=native_body(ExtractRequest, None))
async def extract(model: str, request: Request, engine: EngineDep) -> Response:
    """Entities, relations, classes or structured data from each item."""
    return await _validated(model, request, engine, ExtractRequest, "extract", _EXTRACT_HINT)
