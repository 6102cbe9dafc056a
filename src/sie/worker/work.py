"""The engine's answer to a work item (or its error) as the item's result, and what the worker then
does with the message.

This is the whole of what a queue worker adds around the engine: the same ``Engine.encode`` / ``score``
/ ``extract`` the HTTP routes call, with the request the item stands for (``sie.queue.codec``), and
the one error table deciding what happens to a failure (``QueueAction``: answer it, retry it later,
give up).
"""

from __future__ import annotations

from dataclasses import dataclass

from msgspec.structs import replace

from sie.engine.ops.parts import Answer, item_id
from sie.errors import QueueAction, told
from sie.queue.contract import WorkItem, WorkResult
from sie.wire import codec
from sie.wire.responses import EncodeResponse, ExtractResponse, ExtractResult, ScoreResponse


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
