"""The engine's answer to a work item (or its error) as the item's result, and what the worker then
does with the message.

This is the whole of what a queue worker adds around the engine: the same ``Engine.encode`` / ``score``
/ ``extract`` the HTTP routes call, with the request the item stands for (``sie.queue.codec``), and
the one error table deciding what happens to a failure (``QueueAction``: answer it, retry it later,
give up).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from msgspec.structs import replace

from sie.engine.errors import RefusedItem
from sie.engine.ops.parts import Answer, item_id
from sie.errors import QueueAction, retry_after, told
from sie.queue.contract import WorkItem, WorkResult
from sie.queue.units import units_of
from sie.wire import codec
from sie.wire.errors import ErrorCode
from sie.wire.responses import EncodeResponse, ExtractResponse, ExtractResult, ScoreResponse

RETRY_GROWTH: Final = 2.0  # each redelivery of a retried item waits twice as long as the one before
MAX_RETRY_DELAY_S: Final = 30.0


@dataclass(frozen=True)
class Outcome:
    """What the worker does with a message: publish ``result`` (None: publish nothing) and ack, or
    NAK it for redelivery after ``retry_after_s``; a retry carries the result to answer with when
    the item cannot wait any longer (``retry_delay``)."""

    action: QueueAction
    result: WorkResult | None
    retry_after_s: int | None = None


@dataclass(frozen=True)
class NakDelays:
    """The first redelivery wait of an item told to wait, by why: ``SIE_NAK_DELAY_S`` while its model
    loads (or was unloaded under it), ``SIE_OOM_NAK_DELAY_S`` after the device ran out of memory (no
    result is sent: another worker, or this one later, may have room), ``elsewhere_s`` when its model
    failed to load here for a reason that may heal (a full disk: another worker may have it loaded).
    Any other wait is the error table's. ``retry_delay`` grows the wait from there (``growth``),
    within the item's deadline."""

    loading_s: float = 5.0
    oom_s: float = 10.0
    elsewhere_s: float = 1.0

    def first_wait(self, outcome: Outcome, fallback_s: float) -> float:
        code = self._code(outcome)
        if code in (ErrorCode.MODEL_LOADING, ErrorCode.MODEL_NOT_LOADED):
            return self.loading_s
        if code == ErrorCode.RESOURCE_EXHAUSTED:
            return self.oom_s
        if code == ErrorCode.MODEL_LOAD_FAILED:
            return self.elsewhere_s
        return outcome.retry_after_s or fallback_s

    def growth(self, outcome: Outcome) -> float:
        """How much longer each redelivery waits than the one before. An item left for another worker
        waits the same short time each time: JetStream offers it to whichever worker pulls next, this
        one too, so its deadline should buy as many offers as its deliveries allow: with two workers,
        19 offers (``SIE_MAX_DELIVER`` 20) all landing here is a 2**-19 chance, while doubling waits
        spend a 30 s deadline in about 7 offers, a 1 in 128 chance."""
        return 1.0 if self.for_another_worker(outcome) else RETRY_GROWTH

    def for_another_worker(self, outcome: Outcome) -> bool:
        """Whether the item was turned away because its model failed to load here (``turned_away``)."""
        return self._code(outcome) == ErrorCode.MODEL_LOAD_FAILED

    @staticmethod
    def _code(outcome: Outcome) -> str | None:
        return outcome.result.error_code if outcome.result is not None else None


def retry_delay(
    wait_s: float,
    deliveries: int,
    max_deliver: int,
    now: float,
    deadline: float | None,
    growth: float = RETRY_GROWTH,
) -> float | None:
    """How long an item answered RETRY on its ``deliveries``-th delivery waits before the next, or
    None: answer it now with its error.

    The first wait (``NakDelays``) grows ``growth``-fold per delivery (up to ``MAX_RETRY_DELAY_S``,
    or the first wait if that is longer), so planned waits (a model or LoRA loading, overload, a
    config on its way) spread over the item's life instead of spending its ``max_deliver`` deliveries
    in as many seconds and ending as a dead letter. Before a deadline a retry lands at most halfway to
    it (half the time left is kept for running the item), and when even that is shorter than the first
    wait the item is answered
    now rather than redelivered after nobody waits for it. The last delivery JetStream allows
    (``max_deliver`` < 1: unlimited) is never spent on a wait either: dead letters are for items no
    worker could settle, not for ones that were told to wait."""
    if 0 < max_deliver <= deliveries + 1:
        return None
    delay = min(wait_s * growth ** max(deliveries - 1, 0), max(MAX_RETRY_DELAY_S, wait_s))
    if deadline is None:
        return delay
    half_left = (deadline - now) / 2
    return None if half_left < wait_s else min(delay, half_left)


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
        units=units_of(response.usage) if response.usage is not None else None,
    )
    return Outcome(QueueAction.ANSWER, result)


def failed(work: WorkItem, error: Exception, worker_id: str) -> Outcome:
    """The error table decides: a retry is a NAK (its result is only sent once it cannot wait any
    longer); anything else is answered. An item its family refused is named by its place in the
    client's request (the work item's), not in the one-item request this worker ran."""
    if isinstance(error, RefusedItem):
        error = error.shifted(work.item_index)
    rule, message = told(error)
    wait = retry_after(error, rule) if rule.queue is QueueAction.RETRY else None
    result = WorkResult(
        work.work_item_id,
        work.request_id,
        work.item_index,
        False,
        error=message,
        error_code=rule.code.value,
        worker_id=worker_id,
        retry_after_s=wait,
    )
    return Outcome(rule.queue, result, wait)
