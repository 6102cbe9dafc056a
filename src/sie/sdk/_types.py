"""The dict shapes that go in and come out of the SDK.

They are ``TypedDict``s, not classes, because the public ``sie-sdk`` hands out plain dicts
(``result["dense"]``) and callers index them; a TypedDict types that without changing it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Required, TypedDict

import numpy as np
from numpy.typing import NDArray

OutputType = Literal["dense", "sparse", "multivector"]
OutputDType = Literal["float32", "float16", "int8", "uint8", "binary", "ubinary"]
ModelState = Literal["available", "loading", "loaded", "unloading", "failed"]


class ImageInput(TypedDict, total=False):
    """An image: encoded bytes, a path, a PIL image or an HWC array; ``format`` names the encoding."""

    data: Any
    format: str


class AudioInput(TypedDict, total=False):
    data: bytes
    format: str
    sample_rate: int


class VideoInput(TypedDict, total=False):
    data: bytes
    format: str


class DocumentInput(TypedDict, total=False):
    """A document (PDF, DOCX, HTML...); ``format`` is inferred from a path's suffix when left out."""

    data: bytes | str | Path
    format: str


class Item(TypedDict, total=False):
    """One thing to encode, score or extract from. Which fields a model needs depends on the model."""

    id: str
    text: str
    images: Sequence[Any]
    audio: AudioInput | bytes
    video: VideoInput | bytes
    document: DocumentInput | bytes | str | Path
    metadata: dict[str, Any]
    multivector: NDArray[np.floating[Any]]


class SparseResult(TypedDict):
    indices: NDArray[np.integer[Any]]
    values: NDArray[np.floating[Any]]


class TimingInfo(TypedDict, total=False):
    """Server-side milliseconds spent in each stage of the request."""

    total_ms: float
    queue_ms: float
    tokenization_ms: float
    inference_ms: float
    postprocessing_ms: float | None


class RequestUsage(TypedDict, total=False):
    """What the whole request was metered at, from the ``X-SIE-Units-*`` headers (each present only
    where the server counted it), as the public SDK reads them."""

    input_tokens: int
    images: int
    content_input_tokens: int


class RequestMetadata(TypedDict, total=False):
    """Which server instance answered and the request's ``usage``, read from the response headers (as
    the public SDK reports them); every result of a batch carries the request's own copy."""

    runtime_instance_id: str
    served_by: str
    usage: RequestUsage


class EncodeResult(TypedDict, total=False):
    """One item's vectors; only the requested outputs are present."""

    model: str
    id: str
    dense: NDArray[Any]
    sparse: SparseResult
    multivector: NDArray[Any]
    timing: TimingInfo
    request: RequestMetadata


class ScoreEntry(TypedDict):
    item_id: str
    score: float
    rank: int


class ContentTokens(TypedDict):
    content_tokens: int


class ScoreUsage(TypedDict, total=False):
    """A score's ``usage`` as the body gives it: ``images`` for a model that reads images, and
    ``input_tokens_details`` where the reranker tells its pairs' own text apart from its template."""

    input_tokens: Required[int]
    images: int
    input_tokens_details: ContentTokens


class ScoreResult(TypedDict, total=False):
    """Scores sorted best first; ``rank`` 0 is the most relevant item."""

    model: str
    query_id: str
    scores: list[ScoreEntry]
    usage: ScoreUsage
    request: RequestMetadata


class Entity(TypedDict, total=False):
    text: str
    label: str
    score: float
    start: int | None
    end: int | None
    bbox: list[int] | None


class Relation(TypedDict):
    head: str
    tail: str
    relation: str
    score: float


class Classification(TypedDict):
    label: str
    score: float


class DetectedObject(TypedDict):
    label: str
    score: float
    bbox: list[int]


class ExtractItemError(TypedDict):
    code: str
    message: str


class ExtractResult(TypedDict, total=False):
    """What was extracted from one item; the four lists are always present, possibly empty."""

    model: str
    id: str
    entities: list[Entity]
    relations: list[Relation]
    classifications: list[Classification]
    objects: list[DetectedObject]
    data: dict[str, Any]
    error: ExtractItemError
    request: RequestMetadata


class ModelDims(TypedDict, total=False):
    dense: int
    sparse: int
    multivector: int


class ProfileInfo(TypedDict, total=False):
    is_default: bool


class ModelLoadError(TypedDict, total=False):
    code: str
    message: str
    attempts: int
    permanent: bool


class ModelInfo(TypedDict, total=False):
    """One entry of ``GET /v1/models``, as the server sends it."""

    name: str
    loaded: bool
    state: ModelState
    last_error: ModelLoadError | None
    inputs: list[str]
    outputs: list[str]
    dims: ModelDims
    max_sequence_length: int | None
    profiles: dict[str, ProfileInfo]


class WorkerInfo(TypedDict, total=False):
    """One worker as a gateway's ``/health`` reports it."""

    name: str
    url: str
    gpu: str
    gpu_count: int
    ready_gpu_slots: int
    healthy: bool
    queue_depth: int
    inflight_batches: int
    loaded_models: list[str]
    memory_used_bytes: int
    memory_total_bytes: int
    bundle: str
    bundle_config_hash: str


class CapacityInfo(TypedDict, total=False):
    """The cluster's capacity (``get_capacity``): healthy workers and the machine profiles running."""

    status: str
    worker_count: int
    gpu_count: int
    models_loaded: int
    configured_gpu_types: list[str]
    live_gpu_types: list[str]
    workers: list[WorkerInfo]


class PoolInfo(TypedDict, total=False):
    """A resource pool: ``spec`` as created, ``status`` with ``state`` (pending, active, expired),
    ``assigned_workers``, ``created_at`` and ``last_renewed``."""

    name: str
    spec: dict[str, Any]
    status: dict[str, Any]


class GenerationUsage(TypedDict, total=False):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class GenerateResult(TypedDict, total=False):
    """``generate``'s answer: the text and why it ended, token counts and timings."""

    model: str
    text: str
    finish_reason: str
    usage: GenerationUsage
    ttft_ms: float
    tpot_ms: float
    logprobs: list[dict[str, Any]]


class GenerateChunk(TypedDict, total=False):
    """One chunk of ``stream_generate``; the last has ``done``, ``finish_reason``, ``usage``, ``ttft_ms``
    (an ``error`` chunk is raised as ``ServerError``, never yielded)."""

    request_id: str
    seq: int
    text_delta: str
    done: bool
    finish_reason: str
    usage: GenerationUsage
    ttft_ms: float
    logprobs: list[dict[str, Any]]
