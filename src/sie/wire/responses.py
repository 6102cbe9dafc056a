"""Typed response bodies. Key order and optional keys follow the public server's bytes exactly:
``id`` appears only when the request item had one; ``timing`` always lists all five fields."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import numpy as np

from sie.core.extraction import Classification, DetectedObject, Entity, ItemError, Relation


class DenseVector(msgspec.Struct):
    dims: int
    dtype: str
    values: np.ndarray[Any, Any]


class SparseVector(msgspec.Struct):
    dims: int | None
    dtype: str
    indices: np.ndarray[Any, Any]
    values: np.ndarray[Any, Any]


class MultiVector(msgspec.Struct):
    token_dims: int
    num_tokens: int
    dtype: str
    # One row per token: the schema says so, where a bare ndarray is documented as one flat row.
    values: Annotated[
        np.ndarray[Any, Any],
        msgspec.Meta(extra_json_schema={"items": {"type": "array", "items": {"type": "number"}}}),
    ]


class EncodeResult(msgspec.Struct, omit_defaults=True):
    id: str | None = None
    dense: DenseVector | None = None
    sparse: SparseVector | None = None
    multivector: MultiVector | None = None


class Timing(msgspec.Struct):
    total_ms: float
    queue_ms: float
    tokenization_ms: float
    inference_ms: float
    postprocessing_ms: float | None = None


class Usage(msgspec.Struct, omit_defaults=True):
    """What a request read, counted after tokenization (never estimated): ``input_tokens``, and for
    a model that takes images the ``images`` it read (0 included)."""

    input_tokens: int
    images: int | None = None


class ContentTokens(msgspec.Struct):
    """The caller's own text in the scored pairs (query, document after truncation, instruction, each
    tokenized alone); the rest of ``input_tokens`` is the reranker's template."""

    content_tokens: int


class ScoreUsage(msgspec.Struct, omit_defaults=True):
    """A score's ``Usage``, with ``input_tokens_details`` where the reranker tells its pairs' content."""

    input_tokens: int
    images: int | None = None
    input_tokens_details: ContentTokens | None = None


class EncodeResponse(msgspec.Struct, omit_defaults=True):
    model: str
    items: list[EncodeResult]
    timing: Timing
    usage: Usage | None = None


class ProfileInfo(msgspec.Struct):
    """``identity`` and the remote digests are the public server's content digests of a profile
    (null where it cannot compute one, as for every remote-free profile whose revision is not
    pinned); we compute none and send null, which its clients read as "not identifiable"."""

    is_default: bool
    identity: str | None = None
    remote_contract_sha256: str | None = None
    remote_execution_sha256: str | None = None
    runtime_instance_id: str | None = None


class ModelError(msgspec.Struct):
    code: str
    message: str
    attempts: int
    permanent: bool


class ModelCapabilities(msgspec.Struct):
    """A generative model's advertised capabilities (null for every other model)."""

    streaming: bool
    grammar: list[str]
    tools: bool
    code: bool
    sql: bool
    guard: bool


class ModelRouting(msgspec.Struct):
    policy: str | None = None
    upstream_kind: str | None = None


class ModelInfo(msgspec.Struct):
    name: str
    inputs: list[str]
    outputs: list[str]
    dims: dict[str, int]
    loaded: bool
    state: str
    last_error: ModelError | None
    max_sequence_length: int | None
    profiles: dict[str, ProfileInfo]
    revision: str | None
    capabilities: ModelCapabilities | None
    routing: ModelRouting


class ModelList(msgspec.Struct):
    models: list[ModelInfo]


class OpenAIEmbedding(msgspec.Struct):
    embedding: list[float] | str
    index: int
    object: str = "embedding"


class OpenAIUsage(msgspec.Struct):
    prompt_tokens: int
    total_tokens: int


class OpenAIEmbeddingsResponse(msgspec.Struct):
    data: list[OpenAIEmbedding]
    model: str
    usage: OpenAIUsage
    object: str = "list"


class ScoreEntry(msgspec.Struct):
    item_id: str
    score: float
    rank: int


class ScoreResponse(msgspec.Struct):
    """Scores best first; ``query_id`` is the query item's id or null."""

    model: str
    query_id: str | None
    scores: list[ScoreEntry]
    usage: ScoreUsage


class RerankDocument(msgspec.Struct):
    text: str


class RerankResult(msgspec.Struct, omit_defaults=True):
    index: int
    relevance_score: float
    document: RerankDocument | None = None


class RerankResponse(msgspec.Struct):
    model: str
    results: list[RerankResult]
    usage: Usage


class ExtractResult(msgspec.Struct, omit_defaults=True):
    """Every item carries all six keys, whichever parts its model fills (as the public server's); an
    item its model could not extract (a document past GLiNER's window count) carries a seventh,
    ``error`` (``{code, message}``), with the parts left empty, and the other items are answered."""

    id: str
    entities: list[Entity]
    relations: list[Relation]
    classifications: list[Classification]
    objects: list[DetectedObject]
    data: dict[str, Any]
    error: ItemError | None = None


class ExtractResponse(msgspec.Struct):
    model: str
    items: list[ExtractResult]
    usage: Usage
