"""``POST /v1/rerank``: the rerank API of Cohere, Jina, Infinity and vLLM clients, on the score path.

Documents may be strings or ``{"text": ...}`` objects; ``top_n`` keeps the best n (at least 1; more
than there are documents returns them all, as Cohere does); ``return_documents`` echoes each text.
Errors use the ``{"error": {...}}`` envelope with the native code, as the public server answers here,
and a cold model is loaded before answering, since these clients do not honour ``Retry-After``.
"""

from __future__ import annotations

from fastapi import Request, Response

from sie.catalog.errors import InvalidInput, require_items
from sie.http.errors import openai_error_response
from sie.http.routes import PostRoute
from sie.server.api.native import engine_of
from sie.server.remote import REMOTE_PARAM, remote_header, router_of
from sie.wire import codec
from sie.wire.requests import Item, RerankRequest, ScoreRequest
from sie.wire.responses import RerankDocument, RerankResponse, RerankResult, Usage


async def rerank(request: Request) -> Response:
    """The documents ranked against the query, best first, each with its index in the request."""
    engine = engine_of(request)
    try:
        raw = await request.body()
        engine.admission.count(raw, codec.JSON, "documents", objects=False)
        body = codec.decode(raw, codec.JSON, RerankRequest)
        texts = [doc if isinstance(doc, str) else doc.text for doc in body.documents]
        require_items(texts)
        if body.top_n is not None and body.top_n < 1:
            raise InvalidInput(f"'top_n' must be at least 1, got {body.top_n}")
        if engine.require(body.model).config.tasks.score is None:
            raise InvalidInput(
                f"Model '{body.model}' does not support reranking (no score task). Use a reranker model."
            )
        # Each document's id is its position, read back from the ranked answer.
        items = [Item(id=str(i), text=t) for i, t in enumerate(texts)]
        engine.admission.sizes(items, "documents")  # named as this route names them
        scoring = ScoreRequest(query=Item(text=body.query), items=items)
        routed = await router_of(request).score(body.model, scoring, remote_header(request), wait_loaded=True)
        answer = routed.answer
    except Exception as exc:  # the engine's one error table (a bad body included), in OpenAI's envelope
        return openai_error_response(exc, native_code=True)
    scores = answer.response.scores
    best = scores[: body.top_n] if body.top_n is not None else scores
    results = []
    for entry_score in best:
        index = int(entry_score.item_id)
        document = RerankDocument(texts[index]) if body.return_documents else None
        results.append(RerankResult(index, entry_score.score, document))
    response = RerankResponse(answer.response.model, results, Usage(answer.tokens))
    return Response(codec.encode_json(response), media_type=codec.JSON, headers=dict(routed.headers))


ROUTES = (
    PostRoute(
        "/v1/rerank",
        rerank,
        ("rerank",),
        RerankRequest,
        RerankResponse,
        json_only=True,
        openai_errors=True,
        headers=(REMOTE_PARAM,),
    ),
)
