"""The two calls a remote profile makes to an upstream of kind ``openai``, and the checks on what
comes back.

``embed`` sends a request's texts to the upstream's ``/embeddings`` (``encoding_format: float``) and
returns one float32 row per text, matched by ``index``; ``rerank`` sends a query and its documents to
its Cohere-shape ``/rerank`` (``top_n``: all of them) and returns one score per document in the order
sent. The upstream's ``usage`` (``prompt_tokens``, else ``total_tokens``) is the token count reported.
An answer that breaks the contract (a missing or repeated index, a width other than the model's, a
value that is not a finite number) is ``UpstreamFailed``, never a half answer.

The public server sends one upstream request per text; one request per caller's request here
(its texts as ``input``), so a request's usage is still exact and a batch costs one round trip.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from sie.catalog.errors import InvalidInput
from sie.upstream.client import UpstreamClient
from sie.upstream.config import Endpoint, UpstreamKind
from sie.upstream.errors import UpstreamFailed

_OVERHEAD_BYTES: Final = 1 << 20
_BYTES_PER_NUMBER: Final = 32  # a float as JSON, generously
_UNKNOWN_WIDTH_BYTES: Final = 64 << 20
_BYTES_PER_RESULT: Final = 256
_ECHO_FACTOR: Final = 6  # an upstream may echo the documents, escaped
_MAX_COUNT: Final = 1 << 32


@dataclass(frozen=True)
class Embedded:
    vectors: np.ndarray  # [texts, width] float32
    tokens: int | None


@dataclass(frozen=True)
class Reranked:
    scores: list[float]
    tokens: int | None


def require_endpoint(client: UpstreamClient, endpoint: Endpoint, operation: str) -> None:
    """A request the upstream cannot serve is refused before anything is sent."""
    upstream = client.upstream
    if upstream.kind is not UpstreamKind.OPENAI:
        raise InvalidInput(
            f"Upstream '{client.name}' is of kind '{upstream.kind.value}'; this release calls kind 'openai' only"
        )
    if endpoint not in upstream.endpoints:
        raise InvalidInput(
            f"This remote profile cannot {operation}: upstream '{client.name}' declares no "
            f"{endpoint.value} endpoint"
        )


async def embed(
    client: UpstreamClient, upstream_model: str, texts: list[str], model: str, width: int | None
) -> Embedded:
    require_endpoint(client, Endpoint.EMBEDDINGS, "encode")
    per_row = _BYTES_PER_NUMBER * width if width else _UNKNOWN_WIDTH_BYTES
    max_bytes = min(_OVERHEAD_BYTES + len(texts) * per_row, _UNKNOWN_WIDTH_BYTES * 4)
    body = {"model": upstream_model, "input": texts, "encoding_format": "float"}
    answer = await client.post("/embeddings", body, max_bytes, model)
    return Embedded(
        _vectors(answer, len(texts), width, model, client.name), _tokens(answer, model, client.name)
    )


async def rerank(
    client: UpstreamClient, upstream_model: str, query: str, documents: list[str], model: str
) -> Reranked:
    require_endpoint(client, Endpoint.RERANK, "score")
    sent = len(query.encode()) + sum(len(d.encode()) for d in documents)
    max_bytes = _OVERHEAD_BYTES + len(documents) * _BYTES_PER_RESULT + _ECHO_FACTOR * sent
    body = {"model": upstream_model, "query": query, "documents": documents, "top_n": len(documents)}
    answer = await client.post("/rerank", body, max_bytes, model)
    return Reranked(_scores(answer, len(documents), model, client.name), _tokens(answer, model, client.name))


def _vectors(answer: dict[str, Any], count: int, width: int | None, model: str, upstream: str) -> np.ndarray:
    data = answer.get("data")
    if not isinstance(data, list) or len(data) != count:
        raise UpstreamFailed(model, upstream, "it returned a different number of embeddings than texts sent")
    rows: list[Any] = [None] * count
    seen: set[int] = set()
    for position, entry in enumerate(data):
        index = entry.get("index", position) if isinstance(entry, dict) else None
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count or index in seen:
            raise UpstreamFailed(model, upstream, "it returned embeddings with a missing or repeated index")
        assert isinstance(entry, dict)
        seen.add(index)
        rows[index] = entry.get("embedding")
    try:
        vectors = np.array(rows)
    except (ValueError, TypeError, OverflowError):
        vectors = np.array([])
    if vectors.ndim != 2 or vectors.shape[1] == 0 or vectors.dtype.kind not in "iuf":
        raise UpstreamFailed(
            model, upstream, "it returned embeddings that are not lists of numbers of one width"
        )
    vectors = vectors.astype(np.float32)
    if not np.isfinite(vectors).all():
        raise UpstreamFailed(model, upstream, "it returned values that are not finite")
    if width is not None and vectors.shape[1] != width:
        raise UpstreamFailed(
            model, upstream, f"it returned {vectors.shape[1]}-dimensional vectors; the model declares {width}"
        )
    return vectors


def _scores(answer: dict[str, Any], count: int, model: str, upstream: str) -> list[float]:
    results = answer.get("results")
    if not isinstance(results, list) or len(results) != count:
        raise UpstreamFailed(model, upstream, "it returned a different number of results than documents sent")
    scores: list[float | None] = [None] * count
    for result in results:
        index = result.get("index") if isinstance(result, dict) else None
        if (
            not isinstance(index, int)
            or isinstance(index, bool)
            or not 0 <= index < count
            or scores[index] is not None
        ):
            raise UpstreamFailed(model, upstream, "it returned results with a missing or repeated index")
        assert isinstance(result, dict)
        score = result.get("relevance_score")
        if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
            raise UpstreamFailed(model, upstream, "it returned a relevance score that is not a finite number")
        scores[index] = float(score)
    return [score for score in scores if score is not None]


def _tokens(answer: dict[str, Any], model: str, upstream: str) -> int | None:
    usage = answer.get("usage")
    if usage is None:
        return None
    if not isinstance(usage, dict):
        raise UpstreamFailed(model, upstream, "it reported malformed usage")
    for key in ("prompt_tokens", "total_tokens"):
        value = usage.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _MAX_COUNT:
            raise UpstreamFailed(model, upstream, "it reported malformed usage")
        return value
    return None
