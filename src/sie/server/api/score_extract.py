"""``POST /v1/score/{model}`` and ``/v1/extract/{model}``.

The bodies are validated exactly as the public server does; models without the task answer 400
with the public hint. Rerankers and extractors arrive with their adapters in later work.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from sie.engine.errors import InvalidInput
from sie.server.api.native import EngineDep, read_body
from sie.server.openapi_docs import native_body
from sie.wire.requests import ExtractRequest, ScoreRequest

router = APIRouter()


@router.post("/v1/score/{model:path}", tags=["score"], openapi_extra=native_body(ScoreRequest, None))
async def score(model: str, request: Request, engine: EngineDep) -> Response:
    """Rerank ``items`` against ``query``."""
    entry = engine.entry(model)
    body = await read_body(request, ScoreRequest)
    if not body.items:
        raise InvalidInput("Field 'items' must not be empty")
    if entry.config.tasks.score is None:
        raise InvalidInput(
            f"Model '{model}' does not support scoring. "
            "Use an encoder model with /v1/encode instead, or use a reranker model."
        )
    raise InvalidInput(f"Model '{model}' declares scoring, but no scoring adapter is available in this build")


@router.post("/v1/extract/{model:path}", tags=["extract"], openapi_extra=native_body(ExtractRequest, None))
async def extract(model: str, request: Request, engine: EngineDep) -> Response:
    """Entities, relations, classes or structured data from each item."""
    entry = engine.entry(model)
    body = await read_body(request, ExtractRequest)
    if not body.items:
        raise InvalidInput("Field 'items' must not be empty")
    if entry.config.tasks.extract is None:
        raise InvalidInput(
            f"Model '{model}' does not support extraction. "
            "Use an extraction model like GLiNER, GLiClass, or Florence-2."
        )
    raise InvalidInput(
        f"Model '{model}' declares extraction, but no extraction adapter is available in this build"
    )
