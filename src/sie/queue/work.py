"""A work item to the engine call it stands for, and the engine's answer (or error) to its result.

This is the whole of what a queue worker adds around the engine: the same ``Engine.encode`` / ``score``
/ ``extract`` the HTTP routes call, with the item's fields as the request, and the engine's one error
table deciding what happens to a failure (``QueueAction``: answer it, retry it later, give up).
"""

from __future__ import annotations

from dataclasses import dataclass

from msgspec.structs import replace

from sie.engine.error_rules import QueueAction, told
from sie.engine.errors import InvalidInput
from sie.engine.ops.parts import Answer, item_id
from sie.queue.contract import Operation, WorkItem, WorkResult
from sie.wire import codec
from sie.wire.requests import (
    EncodeParams,
    EncodeRequest,
    ExtractParams,
    ExtractRequest,
    Item,
    ScoreRequest,
)
from sie.wire.responses import EncodeResponse, ExtractResponse, ExtractResult, ScoreResponse

EngineRequest = EncodeRequest | ScoreRequest | ExtractRequest


def engine_request(work: WorkItem) -> EngineRequest:
    """The request the item stands for; a malformed item is the client's error (``InvalidInput``)."""
    options = dict(work.options or {})
    if work.operation == Operation.ENCODE:
        if work.is_query is not None:  # the public gateway sends it beside the options
            options["is_query"] = work.is_query
        params = EncodeParams(
            output_types=work.output_types,  # type: ignore[arg-type]  # names are checked by the plan
            instruction=work.instruction,
            options=options or None,
        )
        return EncodeRequest(items=[_one(work.item, "item")], params=params)
    if work.operation == Operation.SCORE:
        if not work.score_items:
            raise InvalidInput("score work item has no score_items")
        return ScoreRequest(
            _one(work.query_item, "query_item"), work.score_items, work.instruction, options or None
        )
    if work.operation == Operation.EXTRACT:
        params_ = ExtractParams(work.labels, work.output_schema, work.instruction, options or None)
        return ExtractRequest(items=[_one(work.item, "item")], params=params_)
    raise InvalidInput(f"unknown operation '{work.operation}'")


def _one(item: Item | None, field: str) -> Item:
    if item is None:
        raise InvalidInput(f"work item has no {field} (payload references are fetched before this)")
    return item


@dataclass(frozen=True)
class Outcome:
    """What the worker does with a message: publish ``result`` (None: publish nothing) and ack, or
    NAK it for redelivery after ``retry_after_s``."""

    action: QueueAction
    result: WorkResult | None
    retry_after_s: int | None = None


def answered(
    work: WorkItem,
    answer: Answer[EncodeResponse] | Answer[ScoreResponse] | Answer[ExtractResponse],
    worker_id: str,
) -> Outcome:
    response = answer.response
    body = response.scores if isinstance(response, ScoreResponse) else response.items[0]
    if isinstance(body, ExtractResult) and work.item is not None and work.item.id is None:
        # The engine saw one item and named it by that position; the request's position is this one.
        body = replace(body, id=item_id(None, work.item_index))
    timing = answer.timing
    result = WorkResult(
        work.work_item_id,
        work.request_id,
        work.item_index,
        True,
        result_msgpack=codec.encode(body, as_json=False),  # the server's bytes (msgpack-numpy arrays)
        inference_ms=timing.inference_ms,
        queue_ms=timing.queue_ms,
        tokenization_ms=timing.tokenization_ms,
        postprocessing_ms=timing.postprocessing_ms,
        worker_id=worker_id,
        units={"input_tokens": answer.tokens},
    )
    return Outcome(QueueAction.ANSWER, result)


def failed(work: WorkItem, error: Exception, worker_id: str) -> Outcome:
    """The error table decides: a retry is a NAK with no result; anything else is answered."""
    rule, message = told(error)
    if rule.queue is QueueAction.RETRY:
        return Outcome(QueueAction.RETRY, None, rule.retry_after_s)
    result = WorkResult(
        work.work_item_id,
        work.request_id,
        work.item_index,
        False,
        error=message,
        error_code=rule.code.value,
        worker_id=worker_id,
    )
    return Outcome(rule.queue, result)
