"""``POST /v1/encode|score|extract/{model}`` on the gateway: check, route, publish, gather, reply.

The body is decoded and checked by the catalogue's own request checks (``sie.catalog.admit``) before
anything is published, so bad input gets the standalone server's 4xx. Then the request becomes its
work items (``sie.queue.codec``: one per item, a score request one in all) on the lane's subject, the
results are gathered from the gateway's inbox and the reply has the server's shape.

Answers that are not results are errors of the one table (``gateway.errors``), rendered by the HTTP
edge: a ``bundle:/org/model`` path whose bundle does not serve the model → 409 ``BUNDLE_CONFLICT``
listing the bundles that do (``routing.bundle_for``); no worker for the lane yet → 503 ``PROVISIONING``
with ``Retry-After`` (clients before sie-sdk
0.7 get the public gateway's ``202 {"status": "provisioning"}`` instead); a profile outside
``SIE_GATEWAY_CONFIGURED_GPUS`` → 503 ``gpu_not_configured``; NATS not joined yet, a refused publish or
a pool stream deeper than ``SIE_GATEWAY_MAX_STREAM_PENDING`` → 503 ``QUEUE_FULL``; no answer within ``SIE_GATEWAY_REQUEST_TIMEOUT`` → 503 ``MODEL_LOADING``; every
item failed → the items' code (a mix of codes: 500 listing each).
"""

from __future__ import annotations

import time
from typing import Final

from msgspec.structs import replace
from opentelemetry.trace import SpanKind
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sie import __version__
from sie.catalog.admit import admit_encode, admit_extract, admit_score
from sie.catalog.bundles import parse_model_spec
from sie.catalog.catalog import CatalogEntry
from sie.catalog.errors import InvalidInput
from sie.errors import Relayed
from sie.gateway.errors import (
    GpuNotConfigured,
    ItemTooLarge,
    NoAnswer,
    Provisioning,
    PublishFailed,
    QueueUnreachable,
    StreamBacklog,
)
from sie.gateway.metrics import OTHER
from sie.gateway.pools import PoolRecord
from sie.gateway.reply import Gathered, render
from sie.gateway.routing import bundle_for, requested
from sie.gateway.state import GatewayState, state_of
from sie.http.auth import principal_of
from sie.http.errors import Envelope, Forbidden, error_response
from sie.http.parts import model_path, timing_headers, usage_headers
from sie.http.routes import PostRoute
from sie.observability import tracing
from sie.queue.codec import Envelope as WorkEnvelope
from sie.queue.codec import WireRequest, work_items
from sie.queue.contract import (
    DEFAULT_LANE_TOKEN,
    INLINE_THRESHOLD_BYTES,
    Lane,
    Operation,
    WorkItem,
    encode_message,
    work_subject,
)
from sie.queue.payloads import item_key, score_key
from sie.wire import codec
from sie.wire.errors import ErrorCode
from sie.wire.requests import EncodeRequest, ExtractRequest, Item, ScoreRequest
from sie.wire.responses import EncodeResponse, ExtractResponse, ScoreResponse

# sie-sdk releases from 0.7 read scale from zero as 503 PROVISIONING and take a 202 for a result.
SDK_WITH_503_PROVISIONING: Final = (0, 7)


def _sdk_version(request: Request) -> tuple[int, int] | None:
    value = request.headers.get("x-sie-sdk-version", "")
    parts = value.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def _provisioning(request: Request, state: GatewayState, exc: Provisioning) -> Response:
    label = state.router.profile_label
    state.metrics.provisioning.labels(label(exc.profile, "any")).inc()
    state.metrics.rejected.labels(label(exc.profile, "unknown"), exc.bundle, "provisioning").inc()
    sdk = _sdk_version(request)
    if sdk is not None and sdk >= SDK_WITH_503_PROVISIONING:
        return error_response(exc, Envelope.NATIVE)
    body = {
        "status": "provisioning",
        "gpu": exc.profile or "",
        "bundle": exc.bundle,
        "estimated_wait_s": exc.wait_s,
        "message": str(exc),
    }
    headers = {"Retry-After": str(exc.wait_s), "X-SIE-Server-Version": __version__}
    return JSONResponse(body, 202, headers=headers)


def _admitted(state: GatewayState, model: str, body: WireRequest) -> CatalogEntry:
    if isinstance(body, EncodeRequest):
        return admit_encode(state.admission, model, body).entry
    if isinstance(body, ScoreRequest):
        return admit_score(state.admission, model, body).entry
    return admit_extract(state.admission, model, body).entry


async def _offload(state: GatewayState, items: list[WorkItem]) -> list[str]:
    """Items whose message would pass 1 MiB go through the payload store; returns the keys written."""
    keys: list[str] = []
    for index, work in enumerate(items):
        if len(encode_message(work)) <= INLINE_THRESHOLD_BYTES:
            continue
        if state.payloads is None:
            raise ItemTooLarge(work.item_index)
        if work.operation == Operation.SCORE:
            key = score_key(work.request_id)
            await state.payloads.put_score(key, work.query_item or Item(), work.score_items or [])
            items[index] = replace(work, query_item=None, score_items=None, query_payload_ref=key)
        else:
            key = item_key(work.request_id, work.item_index)
            await state.payloads.put_item(key, work.item or Item())
            items[index] = replace(work, item=None, payload_ref=key)
        keys.append(key)
        state.metrics.payload_offloads.inc()
    return keys


async def _traced(request: Request, into: type[WireRequest], operation: Operation) -> Response:
    if not tracing.enabled():
        return await _serve(request, into)
    model = request.path_params["model"]
    parent = tracing.extract(request.headers.get("traceparent"), request.headers.get("tracestate"))
    with tracing.span(f"gateway.{operation.value}", SpanKind.SERVER, parent, model=model) as span:
        response = await _serve(request, into)
        span.set_attribute("http.status_code", response.status_code)
        span.set_attribute("machine_profile", request.headers.get("x-sie-machine-profile") or "")
        return response


async def _serve(request: Request, into: type[WireRequest]) -> Response:
    started = time.perf_counter()
    state = state_of(request)
    pinned, model = _model_spec(request.path_params["model"])
    state.admission.require(model)  # 404 before the body is read, as the server does
    raw, content_type = await request.body(), request.headers.get("content-type")
    state.admission.count(raw, content_type)  # before anything is decoded, let alone published
    body = codec.decode(raw, content_type, into)
    entry = _admitted(state, model, body)
    bundle = bundle_for(entry, state.bundles, pinned)
    profile_header, pool_header = (
        request.headers.get("x-sie-machine-profile"),
        request.headers.get("x-sie-pool"),
    )
    record = await _leased(request, state, requested(profile_header, pool_header)[0])
    try:
        lane = state.router.route(bundle, profile_header, pool_header, pool_known=record is not None)
    except Provisioning as exc:
        return _provisioning(request, state, exc)
    except GpuNotConfigured:
        state.metrics.rejected.labels(OTHER, bundle, "gpu_not_configured").inc()
        raise
    if record is not None and lane.pool != DEFAULT_LANE_TOKEN:
        lane = Lane(record.spec.queue_pool, lane.machine_profile, lane.bundle)  # its queue namespace
    return await _dispatch(request, state, model, entry.name, body, lane, started)


def _model_spec(path: str) -> tuple[str | None, str]:
    """A model path's pinned bundle (``bundle:/org/model``, split at the first ``:/``) and model."""
    if ":/" not in path:
        return None, path
    try:
        return parse_model_spec(path)
    except ValueError as exc:
        raise InvalidInput(f"Invalid model path '{path}': {exc}") from exc


async def _leased(request: Request, state: GatewayState, pool: str | None) -> PoolRecord | None:
    """The lease of the pool a request names, which only its owner (or the admin) may route into;
    None for the default pool, or one not leased (yet)."""
    if not pool or pool.lower() == DEFAULT_LANE_TOKEN or state.pools is None:
        return None
    record = await state.pools.record(pool)
    if record is not None and not principal_of(request).may_route_into(record.owner):
        raise Forbidden(f"Pool '{record.spec.name}' belongs to another token")
    return record


async def _dispatch(
    request: Request,
    state: GatewayState,
    model: str,
    answering_as: str,  # the admitted entry: the variant a ``profile`` option picks, as the server answers
    body: WireRequest,
    lane: Lane,
    started: float,
) -> Response:
    dispatcher = state.dispatcher
    if dispatcher is None:
        raise QueueUnreachable("The queue (NATS) is not reachable yet")
    request_id = dispatcher.new_request_id()
    timeout_s = state.settings.gateway_request_timeout
    now = time.time()
    trace = tracing.inject() if tracing.enabled() else {}  # the worker's span is this request's child
    envelope = WorkEnvelope(
        request_id=request_id,
        model_id=model,
        pool_name=lane.pool,
        machine_profile=lane.machine_profile,
        router_id=dispatcher.router_id,
        reply_subject=dispatcher.reply_subject(request_id),
        timestamp=now,
        deadline=now + timeout_s,
        traceparent=trace.get("traceparent"),
        tracestate=trace.get("tracestate"),
    )
    tracing.REQUEST_ID.set(request_id)
    items = work_items(body, envelope)
    operation = items[0].operation
    with state.shares.hold(principal_of(request).owner, lane.pool, len(items)):
        keys = await _offload(state, items)
        subject = work_subject(lane.pool, lane.machine_profile, lane.bundle, model)
        try:
            await dispatcher.ensure_stream(lane.pool)
            await dispatcher.check_backlog(lane.pool)
            publish_started = time.perf_counter()
            results = await dispatcher.run(request_id, subject, items, timeout_s)
        except PublishFailed:
            state.metrics.rejected.labels(lane.machine_profile, lane.bundle, "queue_publish_failed").inc()
            raise
        except StreamBacklog:
            state.metrics.rejected.labels(lane.machine_profile, lane.bundle, "queue_backpressure").inc()
            raise
        finally:
            if keys and state.payloads is not None:
                await state.payloads.delete(keys)
    metrics = state.metrics
    metrics.labelled(metrics.items_published, operation).inc(len(items))
    metrics.labelled(metrics.result_wait, operation).observe(time.perf_counter() - publish_started)
    if any(result is None for result in results):
        state.metrics.rejected.labels(
            lane.machine_profile, lane.bundle, "upstream_timeout_model_loading"
        ).inc()
        raise NoAnswer(model, timeout_s)
    gathered = Gathered.of([r for r in results if r is not None])
    refused = _refused(gathered)
    if refused is not None:
        raise refused
    if not gathered.answers:
        raise _all_failed(gathered)
    total_ms = (time.perf_counter() - started) * 1000
    as_json = codec.wants_json(request.headers.get("accept"))
    query_id = body.query.id if isinstance(body, ScoreRequest) else None
    content = render(operation, answering_as, query_id, gathered, total_ms, as_json=as_json)
    headers = timing_headers(gathered.timing(total_ms)) | usage_headers(gathered.usage)
    headers["X-SIE-Served-By"] = "queue"
    headers["X-SIE-Request-Id"] = request_id
    workers = sorted({r.worker_id for r in gathered.answers if r.worker_id})
    if workers:
        headers["X-SIE-Worker"] = ",".join(workers)
    return Response(content, media_type=codec.media_type(as_json=as_json), headers=headers)


# The codes of an item its family refused (``Prepared.refused``), which fail a whole encode or score
# on the server: a text past the window under ``overflow_policy: error``. The gateway answers them as
# the server does (one 400 naming the item) rather than as a partial answer; an extraction's refused
# item is an answer (its ``items[i].error``), never a failure here.
WHOLE_REQUEST_CODES: Final = frozenset({ErrorCode.INPUT_TOO_LONG.value})


def _refused(gathered: Gathered) -> Relayed | None:
    """The first item refused with a whole-request code (the worker named it by its request index)."""
    for failure in sorted(gathered.failures, key=lambda f: f.item_index):
        if failure.error_code in WHOLE_REQUEST_CODES:
            return Relayed(failure.error_code, failure.error or "Input too long")
    return None


def _all_failed(gathered: Gathered) -> Relayed:
    """Every item failed: one code for all → that code and its message; a mix → 500 listing each."""
    codes = {f.error_code for f in gathered.failures}
    first = gathered.failures[0]
    if len(codes) == 1:
        return Relayed(first.error_code or "INTERNAL_ERROR", first.error or "failed")
    details = [
        {"item_index": f.item_index, "code": f.error_code, "message": f.error} for f in gathered.failures
    ]
    return Relayed("INTERNAL_ERROR", "Every item failed", {"details": details})


async def encode(request: Request) -> Response:
    """Embeddings through the cluster's workers, answered as the server answers them."""
    return await _traced(request, EncodeRequest, Operation.ENCODE)


async def score(request: Request) -> Response:
    """A query scored against items by a worker, answered as the server answers it."""
    return await _traced(request, ScoreRequest, Operation.SCORE)


async def extract(request: Request) -> Response:
    """Extraction through the cluster's workers, answered as the server answers it."""
    return await _traced(request, ExtractRequest, Operation.EXTRACT)


ROUTES: Final = (
    PostRoute(model_path("/v1/encode"), encode, ("encode",), EncodeRequest, EncodeResponse),
    PostRoute(model_path("/v1/score"), score, ("score",), ScoreRequest, ScoreResponse),
    PostRoute(model_path("/v1/extract"), extract, ("extract",), ExtractRequest, ExtractResponse),
)
