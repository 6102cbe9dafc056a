"""Encode and score through a remote profile, answered in the same wire shapes the engine answers
(``usage.input_tokens``: the upstream's own count, 0 when it reports none).

The request passes the same item checks as a local one (``Admission.items``: counts, text size, no
audio/video/document), then what an OpenAI-compatible upstream can serve: plain text only, dense
output only, no LoRA. Options resolve as for a local request (``plan_encode``: the profile's runtime
under the request's), so templates and instructions shape the text exactly as the local model would
see it; ``normalize: true`` re-normalises the upstream's rows, and ``output_dtype`` quantises them as
the engine does. Nothing the caller sends picks where the call goes: the upstream and its model id
come from the profile, its URL from the operator's upstreams file.
"""

from __future__ import annotations

import time
from typing import Final

import numpy as np

from sie.catalog.admission import Admission
from sie.catalog.catalog import CatalogEntry
from sie.catalog.encode_plan import plan_encode
from sie.catalog.errors import InvalidInput
from sie.catalog.options import overlay
from sie.core.options import Capability
from sie.engine.ops.parts import Answer, item_id
from sie.engine.ops.score import ranked
from sie.postprocess.quantize import l2_normalize, quantize, wire_dtype_name
from sie.upstream import openai
from sie.upstream.client import UpstreamClient
from sie.upstream.pool import UpstreamPool
from sie.wire.requests import EncodeRequest, Item, ScoreRequest
from sie.wire.responses import (
    DenseVector,
    EncodeResponse,
    EncodeResult,
    ScoreResponse,
    ScoreUsage,
    Timing,
    Usage,
)

# The public server's adapter for an OpenAI-compatible upstream; its ``remote.sie`` one (another SIE
# server's native API) parses and is refused per request.
OPENAI_ADAPTER: Final = "sie_server.adapters.remote.openai"


def _client(pool: UpstreamPool, entry: CatalogEntry) -> UpstreamClient:
    if entry.profile.adapter_path.split(":", 1)[0] != OPENAI_ADAPTER:
        raise InvalidInput(
            f"Model '{entry.name}': this release serves remote profiles through {OPENAI_ADAPTER} only, "
            f"not {entry.profile.adapter_path}"
        )
    return pool.client(entry)


def _text(item: Item, label: str) -> str:
    if item.text is None or item.images:
        raise InvalidInput(f"{label}: an OpenAI-compatible upstream takes items of plain text only")
    return item.text


def _timing(started: float) -> Timing:
    elapsed = (time.perf_counter() - started) * 1000
    return Timing(total_ms=elapsed, queue_ms=0.0, tokenization_ms=0.0, inference_ms=elapsed)


async def encode(
    pool: UpstreamPool, admission: Admission, entry: CatalogEntry, request: EncodeRequest, reported: str
) -> Answer[EncodeResponse]:
    """``reported`` is the id the caller asked for (a bridged request's bare model id)."""
    started = time.perf_counter()
    admission.items(request.items)
    params = request.params
    options = params.options if params else None
    plan = plan_encode(
        entry.name,
        entry.config.output_types(),
        entry.profile.runtime,
        options,
        output_types=params.output_types if params else None,
        output_dtype=params.output_dtype if params else None,
        instruction=params.instruction if params else None,
    )
    others = sorted(c.value for c in plan.output_types if c is not Capability.DENSE)
    if others or not plan.output_types:
        raise InvalidInput(
            "an OpenAI-compatible upstream returns dense vectors only; "
            f"this profile cannot produce {', '.join(others)}"
        )
    if plan.lora is not None or plan.muvera:
        raise InvalidInput("a remote profile runs no LoRA and no MUVERA: the upstream serves its own model")
    texts = [plan.shaped(_text(item, f"Item {i}")) for i, item in enumerate(request.items)]
    client = _client(pool, entry)
    dense = entry.config.tasks.encode.dense if entry.config.tasks.encode else None
    width = dense.dim if dense is not None else None
    embedded = await openai.embed(
        client, str(entry.profile.loadtime["upstream_model"]), texts, reported, width
    )
    vectors = embedded.vectors
    if overlay(entry.profile.runtime, options).get("normalize") is True:
        vectors = l2_normalize(vectors)
    rows = quantize(vectors, plan.output_dtype)
    dtype = wire_dtype_name(plan.output_dtype)
    results = [
        EncodeResult(id=item.id, dense=DenseVector(int(vectors.shape[1]), dtype, row))
        for item, row in zip(request.items, rows, strict=True)
    ]
    timing, tokens = _timing(started), embedded.tokens or 0
    response = EncodeResponse(model=reported, items=results, timing=timing, usage=Usage(input_tokens=tokens))
    return Answer(response, timing, tokens)


async def score(
    pool: UpstreamPool, admission: Admission, entry: CatalogEntry, request: ScoreRequest, reported: str
) -> Answer[ScoreResponse]:
    started = time.perf_counter()
    admission.items(request.items, request.query)
    if overlay(entry.profile.runtime, request.options).get("lora_id") is not None:
        raise InvalidInput("a remote profile runs no LoRA: the upstream serves its own model")
    query = _text(request.query, "Query")
    if request.instruction:
        query = f"{request.instruction} {query}"
    documents = [_text(item, f"Item {i}") for i, item in enumerate(request.items)]
    client = _client(pool, entry)
    upstream_model = str(entry.profile.loadtime["upstream_model"])
    reranked = await openai.rerank(client, upstream_model, query, documents, reported)
    ids = [item_id(item.id, i) for i, item in enumerate(request.items)]
    response = ScoreResponse(
        model=reported,
        query_id=request.query.id,
        scores=ranked(ids, np.asarray(reranked.scores, dtype=np.float64)),
        usage=ScoreUsage(input_tokens=reranked.tokens or 0),
    )
    return Answer(response, _timing(started), reranked.tokens or 0)
