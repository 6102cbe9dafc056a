"""A request to its work items and a work item back to the request it stands for: the two halves of the
cluster's codec, as pure functions beside each other so that a field one side writes the other reads.

A gateway publishes one ``WorkItem`` per item of an encode or extract request (a score request: one in
all, carrying the query and every document) and stamps each with an ``Envelope`` (where the answer
goes, when nobody waits any more); a worker turns each back into the one-item request the engine
serves. ``tests/queue/test_codec.py`` carries every field of every wire request through both halves
and fails on one that is dropped.

Two fields travel where the public work item has them: encode's ``output_dtype`` inside ``options``
(the public ``WorkItem`` has no field of its own for it; the request's own field wins over an option
of the same name, as in the plan), and ``is_query`` beside the options when a public gateway sends it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from sie.core.options import OutputDType, OutputType
from sie.errors import SieError
from sie.queue.contract import Operation, WorkItem
from sie.wire.errors import ErrorCode
from sie.wire.requests import (
    EncodeParams,
    EncodeRequest,
    ExtractParams,
    ExtractRequest,
    Item,
    ScoreRequest,
)

WireRequest = EncodeRequest | ScoreRequest | ExtractRequest
OPERATIONS: Final[dict[type[WireRequest], Operation]] = {
    EncodeRequest: Operation.ENCODE,
    ScoreRequest: Operation.SCORE,
    ExtractRequest: Operation.EXTRACT,
}
_DTYPE_OPTION: Final = "output_dtype"
_DTYPES: Final = frozenset(d.value for d in OutputDType)
_OUTPUT_TYPES: Final = frozenset(t.value for t in OutputType)


class WorkItemInvalid(SieError):
    """A work item that stands for no request (a peer's bug, or a hand-made message): answered
    ``INVALID_INPUT``, since redelivering it cannot help."""

    code = ErrorCode.INVALID_INPUT


@dataclass(frozen=True)
class Envelope:
    """What every work item of one request carries beside the request itself."""

    request_id: str
    model_id: str
    pool_name: str
    machine_profile: str
    router_id: str
    reply_subject: str
    timestamp: float  # Unix seconds when the gateway made the items
    deadline: float  # Unix seconds after which nobody waits for the answer
    profile_id: str = "default"
    traceparent: str | None = None  # W3C trace context: the worker's span is the request's child
    tracestate: str | None = None


def _item(envelope: Envelope, operation: Operation, index: int, total: int, **fields: Any) -> WorkItem:
    return WorkItem(
        work_item_id=f"{envelope.request_id}.{index}",
        request_id=envelope.request_id,
        item_index=index,
        total_items=total,
        operation=operation.value,
        model_id=envelope.model_id,
        profile_id=envelope.profile_id,
        pool_name=envelope.pool_name,
        machine_profile=envelope.machine_profile,
        router_id=envelope.router_id,
        reply_subject=envelope.reply_subject,
        timestamp=envelope.timestamp,
        deadline=envelope.deadline,
        traceparent=envelope.traceparent,
        tracestate=envelope.tracestate,
        **fields,
    )


def work_items(request: WireRequest, envelope: Envelope) -> list[WorkItem]:
    """The work items a gateway publishes for ``request``."""
    if isinstance(request, ScoreRequest):
        fields = {
            "query_item": request.query,
            "score_items": request.items,
            "instruction": request.instruction,
            "options": request.options,
        }
        return [_item(envelope, Operation.SCORE, 0, 1, **fields)]
    if isinstance(request, EncodeRequest):
        operation, fields = Operation.ENCODE, _encode_fields(request.params)
    else:
        operation, fields = Operation.EXTRACT, _extract_fields(request.params)
    total = len(request.items)
    return [
        _item(envelope, operation, index, total, item=item, **fields)
        for index, item in enumerate(request.items)
    ]


def _encode_fields(params: EncodeParams | None) -> dict[str, Any]:
    if params is None:
        return {}
    options = dict(params.options or {})
    if params.output_dtype is not None:
        options[_DTYPE_OPTION] = params.output_dtype.value
    return {
        "output_types": [t.value for t in params.output_types] if params.output_types is not None else None,
        "instruction": params.instruction,
        "options": options or None,
    }


def _extract_fields(params: ExtractParams | None) -> dict[str, Any]:
    if params is None:
        return {}
    return {
        "labels": params.labels,
        "output_schema": params.output_schema,
        "instruction": params.instruction,
        "options": params.options,
    }


def request_of(work: WorkItem) -> WireRequest:
    """The one-item request ``work`` stands for (a score: the whole request); payload references must
    have been read back into the item first."""
    options = dict(work.options or {})
    if work.operation == Operation.ENCODE:
        if work.is_query is not None:  # the public gateway sends it beside the options
            options["is_query"] = work.is_query
        dtype = options.get(_DTYPE_OPTION)
        output_dtype = OutputDType(options.pop(_DTYPE_OPTION)) if dtype in _DTYPES else None
        params = EncodeParams(
            output_types=_output_types(work.output_types),
            output_dtype=output_dtype,
            instruction=work.instruction,
            options=options or None,
        )
        return EncodeRequest(items=[_one(work.item, "item")], params=params)
    if work.operation == Operation.SCORE:
        if not work.score_items:
            raise WorkItemInvalid("score work item has no score_items")
        return ScoreRequest(
            _one(work.query_item, "query_item"), work.score_items, work.instruction, options or None
        )
    if work.operation == Operation.EXTRACT:
        params_ = ExtractParams(work.labels, work.output_schema, work.instruction, options or None)
        return ExtractRequest(items=[_one(work.item, "item")], params=params_)
    raise WorkItemInvalid(f"unknown operation '{work.operation}'")


def _one(item: Item | None, field: str) -> Item:
    if item is None:
        raise WorkItemInvalid(f"work item has no {field} (payload references are fetched before this)")
    return item


def _output_types(names: list[str] | None) -> list[OutputType] | None:
    """A public gateway forwards output types unread; ours decoded them from the request already."""
    if names is None:
        return None
    unknown = sorted(set(names) - _OUTPUT_TYPES)
    if unknown:
        raise WorkItemInvalid(f"Unknown output types: {unknown}. Allowed: {sorted(_OUTPUT_TYPES)}")
    return [OutputType(name) for name in names]
