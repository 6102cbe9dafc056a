"""The queue contract between gateways and workers: subjects, streams, consumers, and the two messages.

These are the public SIE's facts (``sie_sdk.queue_types`` 0.10.1), so our gateway and workers
interoperate with the public ones: a gateway publishes one ``WorkItem`` per item (a score: one per
request) to ``sie.work.{pool}.{machine_profile}.{bundle}.{model}``, captured by the pool's stream
``WORK_POOL_{pool}``; a worker answers each on its ``reply_subject`` (a NATS core inbox) with a
``WorkResult``. Both are msgpack maps; optional keys are left out rather than sent as nil, and keys a
side does not know are ignored, so older and newer peers read each other.

Items travel as the server's own ``Item`` struct (unknown item keys dropped, image bytes raw), so a
decoded work item is ready for the engine without another conversion.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Final, TypeVar

import msgspec

from sie.wire.requests import Item

WORK_SUBJECT_PREFIX: Final = "sie.work"
# Not ``sie.work.dead``: that would overlap the pool streams' ``sie.work.{pool}.*.*.*``.
DEAD_LETTER_PREFIX: Final = "sie.dlq"
# What JetStream publishes when a consumer gave up on a message (a gateway dead-letters it).
MAX_DELIVERIES_ADVISORY_PREFIX: Final = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES"
WORK_POOL_STREAM_PREFIX: Final = "WORK_POOL"
WORK_WORKER_STREAM_PREFIX: Final = "WORK_WORKER"
# The pool, machine profile and bundle of a gateway or worker that names none, on both sides, so an
# unconfigured gateway and worker meet on one lane.
DEFAULT_LANE_TOKEN: Final = "default"
# JetStream's default largest message; a bigger item travels by reference (``payload_ref``).
INLINE_THRESHOLD_BYTES: Final = 1_048_576
# How long a work stream keeps an item nobody took (``SIE_STREAM_MAX_AGE_S``'s default; here, with no
# NATS client to import, because every process's settings read it).
STREAM_MAX_AGE_S: Final = 120.0

Index = Annotated[int, msgspec.Meta(ge=0)]
T = TypeVar("T")


class Operation(StrEnum):
    ENCODE = "encode"
    SCORE = "score"
    EXTRACT = "extract"
    LOAD = "load"  # no input: asks a worker to load the model (scale-up warm-up)


class WorkItem(msgspec.Struct, omit_defaults=True):
    # Always present.
    work_item_id: str  # "{request_id}.{item_index}"
    request_id: str  # "{router_id}-{counter}"
    item_index: Index
    total_items: Index
    operation: str  # an ``Operation``; kept a string so an unknown one is answered, not undecodable
    model_id: str
    profile_id: str
    pool_name: str
    machine_profile: str
    router_id: str
    reply_subject: str
    timestamp: float  # Unix seconds when the gateway made it
    # Optional: left out of the map when unset.
    bundle_config_hash: str | None = None
    display_model: str | None = None  # the id the caller asked for, when another route serves it
    item: Item | None = None
    payload_ref: str | None = None  # key in the payload store, instead of ``item``
    output_types: list[str] | None = None
    instruction: str | None = None
    is_query: bool | None = None
    options: dict[str, Any] | None = None
    query_item: Item | None = None
    query_payload_ref: str | None = None
    score_items: list[Item] | None = None
    labels: list[str] | None = None
    output_schema: dict[str, Any] | None = None
    generate: dict[str, Any] | None = None
    traceparent: str | None = None
    tracestate: str | None = None
    deadline: float | None = None  # Unix seconds after which nobody waits for the answer
    fallback_reason: str | None = None


class WorkResult(msgspec.Struct, omit_defaults=True):
    work_item_id: str
    request_id: str
    item_index: Index
    success: bool
    # The answer for this item as msgpack bytes the gateway splices into its response unread:
    # encode one EncodeResult map, score the list of ScoreEntry maps, extract one ExtractResult map.
    result_msgpack: bytes | None = None
    error: str | None = None
    error_code: str | None = None
    inference_ms: float | None = None
    queue_ms: float | None = None
    processing_ms: float | None = None
    worker_id: str | None = None
    tokenization_ms: float | None = None
    postprocessing_ms: float | None = None
    payload_fetch_ms: float | None = None
    units: dict[str, int] | None = None  # {"input_tokens": n, ...}: counted, never estimated
    execution_identity_sha256: str | None = None
    executed_bundle_config_hash: str | None = None
    retry_after_s: int | None = None


class ContractError(ValueError):
    """A message that is not a valid work item or result (a peer's bug, not a client's input)."""


_ENCODER: Final = msgspec.msgpack.Encoder()
_ITEMS: Final = msgspec.msgpack.Decoder(WorkItem)
_RESULTS: Final = msgspec.msgpack.Decoder(WorkResult)


def encode_message(message: WorkItem | WorkResult) -> bytes:
    return _ENCODER.encode(message)


def decoded(decoder: msgspec.msgpack.Decoder[T] | msgspec.json.Decoder[T], data: bytes, what: str) -> T:
    """``data`` decoded, or a ``ContractError`` naming ``what``: every way bytes from a peer can fail
    to be that message (bad bytes, wrong types, invalid UTF-8, nesting past the parser's depth, which
    is a ``RecursionError``) is the one error a consumer settles the message on (a worker terms it)."""
    try:
        return decoder.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise ContractError(f"not {what}: {exc}") from None
    except RecursionError:
        raise ContractError(f"not {what}: nested too deeply") from None


def decode_work_item(data: bytes) -> WorkItem:
    return decoded(_ITEMS, data, "a work item")


def decode_work_result(data: bytes) -> WorkResult:
    return decoded(_RESULTS, data, "a work result")


def subject_token(value: str) -> str:
    """One NATS subject token from a model id, profile, bundle or worker id: ``/`` becomes ``__``,
    ``.`` becomes ``_dot_``, and ``*``, ``>`` and spaces become ``_`` (the public mapping, so both sides
    of a mixed cluster bind the same subjects)."""
    for old, new in (("/", "__"), (".", "_dot_"), ("*", "_"), (">", "_"), (" ", "_")):
        value = value.replace(old, new)
    return value


def model_of_token(token: str) -> str:
    """Best-effort inverse of ``subject_token`` for model ids (which never hold ``__``); the work
    item's ``model_id`` is the authority, the subject only routes."""
    return token.replace("__", "/").replace("_dot_", ".")


def worker_token(worker_id: str) -> str:
    """A worker id as a subject token. An empty id is refused: a default would make two workers share
    one durable consumer."""
    if not worker_id.strip():
        raise ValueError("worker id is empty; set SIE_WORKER_ID (or HOSTNAME)")
    return subject_token(worker_id)


def lane_subject(pool: str, machine_profile: str, bundle: str) -> str:
    """The subject prefix of one lane; its models' subjects are one token under it."""
    return f"{WORK_SUBJECT_PREFIX}.{pool}.{subject_token(machine_profile)}.{subject_token(bundle)}"


@dataclass(frozen=True)
class Lane:
    """Which work a worker takes, and where a gateway sends it: a pool, machine profile and bundle."""

    pool: str
    machine_profile: str
    bundle: str

    @property
    def filter_subject(self) -> str:
        return f"{lane_subject(self.pool, self.machine_profile, self.bundle)}.*"


def lane_of(pool: str, machine_profile: str | None, bundle: str | None) -> Lane:
    """A worker's lane from its settings; what is unset is ``default`` (``DEFAULT_LANE_TOKEN``)."""
    return Lane(
        pool or DEFAULT_LANE_TOKEN, machine_profile or DEFAULT_LANE_TOKEN, bundle or DEFAULT_LANE_TOKEN
    )


def work_subject(pool: str, machine_profile: str, bundle: str, model: str) -> str:
    return f"{lane_subject(pool, machine_profile, bundle)}.{subject_token(model)}"


def pool_stream(pool: str) -> str:
    """The one stream of a pool: every profile, bundle and model of it."""
    return f"{WORK_POOL_STREAM_PREFIX}_{pool}"


def pool_stream_subjects(pool: str) -> list[str]:
    return [f"{WORK_SUBJECT_PREFIX}.{pool}.*.*.*"]


def pool_of_stream(stream: str) -> str | None:
    """The pool whose stream ``stream`` is named as, or None for any other name (the inverse of
    ``pool_stream``; whether the stream really is that pool's is its subjects' to say)."""
    prefix = f"{WORK_POOL_STREAM_PREFIX}_"
    pool = stream.removeprefix(prefix)
    return pool if stream.startswith(prefix) and pool else None


def lane_consumer(pool: str, machine_profile: str, bundle: str) -> str:
    """The durable pull consumer every worker of one lane (pool, profile, bundle) shares."""
    return f"{subject_token(pool)}_{subject_token(machine_profile)}_{subject_token(bundle)}"


def worker_subject(pool: str, machine_profile: str, bundle: str, model: str, worker_id: str) -> str:
    """A work item addressed to one worker (direct dispatch); the pool stream does not capture it."""
    return f"{work_subject(pool, machine_profile, bundle, model)}.{worker_token(worker_id)}"


def worker_stream(worker_id: str) -> str:
    return f"{WORK_WORKER_STREAM_PREFIX}_{worker_token(worker_id)}"


def worker_stream_subjects(pool: str, machine_profile: str, bundle: str, worker_id: str) -> list[str]:
    return [f"{lane_subject(pool, machine_profile, bundle)}.*.{worker_token(worker_id)}"]


def worker_consumer(worker_id: str) -> str:
    return f"gen-{worker_token(worker_id)}"


# -- config deltas (sie-config's writes, ``sie.catalog.follower`` applies them) -------------------------

CONFIG_ALL_SUBJECT: Final = "sie.config.models._all"  # every delta: gateways listen here


def config_subject(bundle: str) -> str:
    """A bundle's deltas: its workers listen here."""
    return f"sie.config.models.{bundle}"


# -- worker heartbeats ------------------------------------------------------------------------------

HEALTH_SUBJECT_PREFIX: Final = "sie.health"


class Heartbeat(msgspec.Struct, omit_defaults=True):
    """What a worker publishes on ``sie.health.{worker_id}`` (JSON, the public sidecar's fields): the
    gateway routes on ``ready``, ``pool_name``, ``machine_profile`` and ``bundle``, lists models from
    ``loaded_models``, and forgets a worker whose heartbeats stop."""

    name: str
    ready: bool
    machine_profile: str
    pool_name: str
    bundle: str
    timestamp: float
    terminated: bool = False
    gpu_count: int = 1
    total_gpu_slots: int = 1
    ready_gpu_slots: int = 1
    bundle_config_hash: str = ""
    loaded_models: list[str] = []
    loading_models: list[str] = []
    queue_depth: int = 0
    inflight_batches: int = 0
    saturated: bool = False
    memory_used_bytes: int = 0
    memory_total_bytes: int = 0


_HEARTBEATS: Final = msgspec.json.Decoder(Heartbeat)


def health_subject(worker_id: str) -> str:
    return f"{HEALTH_SUBJECT_PREFIX}.{worker_token(worker_id)}"


def encode_heartbeat(heartbeat: Heartbeat) -> bytes:
    return msgspec.json.encode(heartbeat)


def decode_heartbeat(data: bytes) -> Heartbeat:
    return decoded(_HEARTBEATS, data, "a heartbeat")


# -- dead letters ---------------------------------------------------------------------------------


class MaxDeliveries(msgspec.Struct):
    """The part of JetStream's ``MAX_DELIVERIES`` advisory (JSON, on
    ``$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{stream}.{consumer}``) a gateway acts on: which
    stream message a consumer gave up on, after how many deliveries."""

    stream: str
    consumer: str
    stream_seq: Annotated[int, msgspec.Meta(ge=1)]
    deliveries: Index = 0


_ADVISORIES: Final = msgspec.json.Decoder(MaxDeliveries)


def decode_advisory(data: bytes) -> MaxDeliveries:
    return decoded(_ADVISORIES, data, "an advisory")


class DeadLetter(msgspec.Struct, omit_defaults=True, kw_only=True):
    """What ``DEAD_LETTERS`` keeps of a work item no worker settled (JSON on ``sie.dlq.{model}``):
    where it was and what became of it, for an operator to find the request, never the tenant's
    payload (texts, images, options), which would outlive the request by the stream's age.
    The item's fields are absent when it was not a work item at all."""

    stream: str
    consumer: str
    stream_seq: int
    deliveries: int
    reason: str  # why it is here: the JetStream event that gave up on it
    error: str  # what the request was answered with
    dead_at: float  # Unix seconds when the gateway moved it
    subject: str | None = None
    work_item_id: str | None = None
    request_id: str | None = None
    item_index: int | None = None
    total_items: int | None = None
    operation: str | None = None
    model_id: str | None = None
    pool_name: str | None = None
    machine_profile: str | None = None
    router_id: str | None = None
    timestamp: float | None = None
    deadline: float | None = None


_DEAD_LETTERS: Final = msgspec.json.Decoder(DeadLetter)


def encode_dead_letter(letter: DeadLetter) -> bytes:
    return msgspec.json.encode(letter)


def decode_dead_letter(data: bytes) -> DeadLetter:
    return decoded(_DEAD_LETTERS, data, "a dead letter")
