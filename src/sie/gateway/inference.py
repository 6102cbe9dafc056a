"""``POST /v1/encode|score|extract/{model}`` on the gateway: check, route, publish, gather, reply.

The body is decoded and checked by the server's own code (``engine.admission`` and the operations'
``admit_*``) before anything is published, so bad input gets the standalone server's 4xx. Then one
work item per item (a score request: one in all) goes to the lane's subject, the results are
gathered from the gateway's inbox and the reply has the server's shape.

Answers that are not results: no worker for the lane yet → ``202 {"status": "provisioning"}`` with
``Retry-After`` (clients of sie-sdk 0.7 and later, which read ``503 PROVISIONING`` instead, get that);
a profile outside ``SIE_GATEWAY_CONFIGURED_GPUS`` → 503 ``gpu_not_configured``; a refused publish →
503 ``QUEUE_FULL``; no answer within ``SIE_GATEWAY_REQUEST_TIMEOUT`` → 503 ``MODEL_LOADING`` with
``Retry-After`` (the workers are still loading, or busy).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Final

from msgspec.structs import replace
from opentelemetry.trace import SpanKind
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sie import __version__
from sie.engine.catalog import CatalogEntry
from sie.engine.ops.admit import admit_encode, admit_extract, admit_score
from sie.gateway.dispatch import PublishFailed
from sie.gateway.reply import Gathered, render
from sie.gateway.routing import GpuNotConfigured, Provisioning, bundle_for
from sie.gateway.state import GatewayState, state_of
from sie.observability import tracing
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
from sie.server.api.http_parts import timing_headers
from sie.server.errors import HTTP
from sie.wire import codec
from sie.wire.errors import ErrorCode, error_envelope
from sie.wire.requests import EncodeRequest, ExtractRequest, Item, ScoreRequest

log = logging.getLogger(__name__)

LOADING_RETRY_AFTER_S: Final = 5
QUEUE_FULL_RETRY_AFTER_S: Final = 5
PROVISIONING_CODE: Final = "PROVISIONING"
# sie-sdk releases from 0.7 read scale from zero as 503 PROVISIONING and take a 202 for a result.
SDK_WITH_503_PROVISIONING: Final = (0, 7)
ERROR_CODE_HEADER: Final = "X-SIE-Error-Code"

WireRequest = EncodeRequest | ScoreRequest | ExtractRequest
_REQUESTS: Final[dict[Operation, type[WireRequest]]] = {
    Operation.ENCODE: EncodeRequest,
    Operation.SCORE: ScoreRequest,
    Operation.EXTRACT: ExtractRequest,
}


def _sdk_version(request: Request) -> tuple[int, int] | None:
    value = request.headers.get("x-sie-sdk-version", "")
    parts = value.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def _provisioning(request: Request, state: GatewayState, exc: Provisioning) -> Response:
    wait = state.settings.gateway_provisioning_retry_after_s
    state.metrics.provisioning.labels(exc.profile or "any").inc()
    state.metrics.rejected.labels(exc.profile or "unknown", exc.bundle, "provisioning").inc()
    message = f"{exc}; capacity is being provisioned, retry after {wait}s"
    headers = {"Retry-After": str(wait), "X-SIE-Server-Version": __version__}
    sdk = _sdk_version(request)
    if sdk is not None and sdk >= SDK_WITH_503_PROVISIONING:
        headers[ERROR_CODE_HEADER] = PROVISIONING_CODE
        return JSONResponse(error_envelope(PROVISIONING_CODE, message), 503, headers=headers)
    body = {
        "status": "provisioning",
        "gpu": exc.profile or "",
        "bundle": exc.bundle,
        "estimated_wait_s": wait,
        "message": message,
    }
    return JSONResponse(body, 202, headers=headers)


def _refusal(code: ErrorCode, message: str, retry_after_s: int | None = None, **extra: Any) -> Response:
    headers = {ERROR_CODE_HEADER: code.value, "X-SIE-Server-Version": __version__}
    if retry_after_s is not None:
        headers["Retry-After"] = str(retry_after_s)
    return JSONResponse(error_envelope(code, message, **extra), HTTP[code].status, headers=headers)


def _admitted(operation: Operation, state: GatewayState, model: str, body: Any) -> CatalogEntry:
    if operation == Operation.ENCODE:
        return admit_encode(state.admission, model, body).entry
    if operation == Operation.SCORE:
        return admit_score(state.admission, model, body).entry
    return admit_extract(state.admission, model, body).entry


def _work_items(operation: Operation, body: Any, base: dict[str, Any]) -> list[WorkItem]:
    if operation == Operation.SCORE:
        assert isinstance(body, ScoreRequest)
        return [
            WorkItem(
                work_item_id=f"{base['request_id']}.0",
                item_index=0,
                total_items=1,
                query_item=body.query,
                score_items=body.items,
                instruction=body.instruction,
                options=body.options,
                **base,
            )
        ]
    items: list[Item] = body.items
    fields: dict[str, Any] = {}
    if isinstance(body, EncodeRequest) and body.params is not None:
        params = body.params
        options = dict(params.options or {})
        if params.output_dtype is not None:  # the queue carries it in options, where it ranks below params
            options["output_dtype"] = params.output_dtype.value
        fields = {
            "output_types": [str(t) for t in params.output_types] if params.output_types else None,
            "instruction": params.instruction,
            "options": options or None,
        }
    elif isinstance(body, ExtractRequest) and body.params is not None:
        params_ = body.params
        fields = {
            "labels": params_.labels,
            "output_schema": params_.output_schema,
            "instruction": params_.instruction,
            "options": params_.options,
        }
    return [
        WorkItem(
            work_item_id=f"{base['request_id']}.{index}",
            item_index=index,
            total_items=len(items),
            item=item,
            **fields,
            **base,
        )
        for index, item in enumerate(items)
    ]


async def _offload(state: GatewayState, items: list[WorkItem]) -> list[str]:
    """Items whose message would pass 1 MiB go through the payload store; returns the keys written."""
    keys: list[str] = []
    for index, work in enumerate(items):
        if len(encode_message(work)) <= INLINE_THRESHOLD_BYTES:
            continue
        if state.payloads is None:
            raise _TooLarge(work.item_index)
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


class _TooLarge(Exception):
    def __init__(self, index: int) -> None:
        super().__init__(index)
        self.index = index


async def _traced(request: Request, operation: Operation) -> Response:
    if not tracing.enabled():
        return await _serve(request, operation)
    model = request.path_params["model"]
    parent = tracing.extract(request.headers.get("traceparent"), request.headers.get("tracestate"))
    with tracing.span(f"gateway.{operation.value}", SpanKind.SERVER, parent, model=model) as span:
        response = await _serve(request, operation)
        span.set_attribute("http.status_code", response.status_code)
        span.set_attribute("machine_profile", request.headers.get("x-sie-machine-profile") or "")
        return response


async def _serve(request: Request, operation: Operation) -> Response:
    started = time.perf_counter()
    state = state_of(request)
    model: str = request.path_params["model"]
    state.admission.require(model)  # 404 before the body is read, as the server does
    body: WireRequest = codec.decode(
        await request.body(), request.headers.get("content-type"), _REQUESTS[operation]
    )
    entry = _admitted(operation, state, model, body)
    bundle = bundle_for(entry, state.bundles)
    try:
        lane = state.router.route(
            bundle, request.headers.get("x-sie-machine-profile"), request.headers.get("x-sie-pool")
        )
    except Provisioning as exc:
        return _provisioning(request, state, exc)
    except GpuNotConfigured as exc:
        state.metrics.rejected.labels(exc.profile, bundle, "gpu_not_configured").inc()
        body_ = {
            "status": "gpu_not_configured",
            "gpu": exc.profile,
            "configured_gpu_types": exc.configured,
            "message": str(exc),
        }
        return JSONResponse(body_, 503, headers={"X-SIE-Server-Version": __version__})
    if lane.pool != DEFAULT_LANE_TOKEN and state.pools is not None:
        record = await state.pools.record(lane.pool)
        if record is not None:  # a leased pool is served by its queue namespace
            lane = Lane(record.spec.queue_pool, lane.machine_profile, lane.bundle)
    return await _dispatch(request, state, operation, model, entry.name, body, lane, started)


async def _dispatch(
    request: Request,
    state: GatewayState,
    operation: Operation,
    model: str,
    answering_as: str,  # the admitted entry: the variant a ``profile`` option picks, as the server answers
    body: Any,
    lane: Lane,
    started: float,
) -> Response:
    dispatcher = state.dispatcher
    if dispatcher is None:
        return _refusal(
            ErrorCode.QUEUE_FULL, "The queue (NATS) is not reachable yet", QUEUE_FULL_RETRY_AFTER_S
        )
    request_id = dispatcher.new_request_id()
    timeout_s = state.settings.gateway_request_timeout
    now = time.time()
    base: dict[str, Any] = {
        "request_id": request_id,
        "operation": operation.value,
        "model_id": model,
        "profile_id": "default",
        "pool_name": lane.pool,
        "machine_profile": lane.machine_profile,
        "router_id": dispatcher.router_id,
        "reply_subject": dispatcher.reply_subject(request_id),
        "timestamp": now,
        "deadline": now + timeout_s,
    }
    if tracing.enabled():  # the worker's span is this request's child (W3C trace context)
        base.update(tracing.inject())  # traceparent (and tracestate): WorkItem fields of the same names
    tracing.REQUEST_ID.set(request_id)
    items = _work_items(operation, body, base)
    try:
        keys = await _offload(state, items)
    except _TooLarge as exc:
        return _refusal(
            ErrorCode.PAYLOAD_TOO_LARGE,
            f"Item {exc.index} is over {INLINE_THRESHOLD_BYTES} bytes and no payload store is configured "
            "(SIE_PAYLOAD_STORE_URL)",
        )
    subject = work_subject(lane.pool, lane.machine_profile, lane.bundle, model)
    try:
        await dispatcher.ensure_stream(lane.pool)
        publish_started = time.perf_counter()
        results = await dispatcher.run(request_id, subject, items, timeout_s)
    except PublishFailed as exc:
        state.metrics.rejected.labels(lane.machine_profile, lane.bundle, "queue_publish_failed").inc()
        return _refusal(ErrorCode.QUEUE_FULL, f"Queue publish failed: {exc}", QUEUE_FULL_RETRY_AFTER_S)
    finally:
        if keys and state.payloads is not None:
            await state.payloads.delete(keys)
    state.metrics.items_published.labels(operation.value).inc(len(items))
    state.metrics.result_wait.labels(operation.value).observe(time.perf_counter() - publish_started)
    if any(result is None for result in results):
        state.metrics.rejected.labels(
            lane.machine_profile, lane.bundle, "upstream_timeout_model_loading"
        ).inc()
        return _refusal(
            ErrorCode.MODEL_LOADING,
            f"Model '{model}' did not answer within {timeout_s:g}s; it may be loading. Retry shortly.",
            LOADING_RETRY_AFTER_S,
        )
    gathered = Gathered.of([r for r in results if r is not None])
    if not gathered.answers:
        return _all_failed(gathered)
    total_ms = (time.perf_counter() - started) * 1000
    as_json = codec.wants_json(request.headers.get("accept"))
    query_id = body.query.id if isinstance(body, ScoreRequest) else None
    content = render(operation, answering_as, query_id, gathered, total_ms, as_json=as_json)
    headers = timing_headers(gathered.timing(total_ms))
    headers["X-SIE-Served-By"] = "queue"
    headers["X-SIE-Request-Id"] = request_id
    workers = sorted({r.worker_id for r in gathered.answers if r.worker_id})
    if workers:
        headers["X-SIE-Worker"] = ",".join(workers)
    return Response(content, media_type=codec.media_type(as_json=as_json), headers=headers)


def _all_failed(gathered: Gathered) -> Response:
    """Every item failed: one code for all → that code's status and message; mixed → 500 listing each."""
    codes = {f.error_code for f in gathered.failures}
    first = gathered.failures[0]
    try:
        code = ErrorCode(first.error_code or "INTERNAL_ERROR")
    except ValueError:
        code = ErrorCode.INTERNAL_ERROR
    if len(codes) == 1:
        return _refusal(code, first.error or "failed")
    details = [
        {"item_index": f.item_index, "code": f.error_code, "message": f.error} for f in gathered.failures
    ]
    return _refusal(ErrorCode.INTERNAL_ERROR, "Every item failed", details=details)


async def encode(request: Request) -> Response:
    return await _traced(request, Operation.ENCODE)


async def score(request: Request) -> Response:
    return await _traced(request, Operation.SCORE)


async def extract(request: Request) -> Response:
    return await _traced(request, Operation.EXTRACT)


ROUTES: Final = [
    Route("/v1/encode/{model:model_id}", encode, methods=["POST"]),
    Route("/v1/score/{model:model_id}", score, methods=["POST"]),
    Route("/v1/extract/{model:model_id}", extract, methods=["POST"]),
]
