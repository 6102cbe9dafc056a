"""The one table from the engine's exceptions to what a caller is told: the wire code, whether retrying
can help, and after how long.

Every front end renders from it. The HTTP server maps each code to a status and OpenAI's code there
(``server.errors``) and sends ``retry_after_s`` as ``Retry-After``; a queue consumer reads ``queue``:
answer the work item with the error and acknowledge it, or leave it for redelivery after
``retry_after_s`` (a NAK with that delay). Nothing here knows HTTP.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from sie.engine.errors import (
    EngineClosed,
    InferenceFailed,
    InvalidInput,
    LoraLoading,
    ModelLoadFailed,
    ModelLoading,
    ModelNotFound,
    ModelNotServed,
    Overloaded,
    PayloadTooLarge,
    ResourceExhausted,
)
from sie.wire.codec import WireDecodeError
from sie.wire.errors import ErrorCode

log = logging.getLogger(__name__)

OOM_RETRY_AFTER_S: Final = 5  # the public server's default


class QueueAction(StrEnum):
    """What a queue consumer does with a work item that raised."""

    ANSWER = "answer"  # the request is wrong: reply with the error and ack (a retry cannot help)
    RETRY = "retry"  # transient: no reply; NAK so it is redelivered after ``retry_after_s``
    GIVE_UP = "give_up"  # the server failed it: reply with the error and ack (as the public worker does)


@dataclass(frozen=True)
class ErrorRule:
    code: ErrorCode
    queue: QueueAction
    retry_after_s: int | None = None  # when retrying makes sense: how long to wait first


_ANSWER: Final = QueueAction.ANSWER

ERROR_TABLE: Final[dict[type[Exception], ErrorRule]] = {
    WireDecodeError: ErrorRule(ErrorCode.INVALID_INPUT, _ANSWER),
    InvalidInput: ErrorRule(ErrorCode.INVALID_INPUT, _ANSWER),
    ModelNotFound: ErrorRule(ErrorCode.MODEL_NOT_FOUND, _ANSWER),
    ModelNotServed: ErrorRule(ErrorCode.MODEL_NOT_SERVED, _ANSWER),
    PayloadTooLarge: ErrorRule(ErrorCode.PAYLOAD_TOO_LARGE, _ANSWER),
    ModelLoadFailed: ErrorRule(ErrorCode.MODEL_LOAD_FAILED, QueueAction.GIVE_UP),
    ModelLoading: ErrorRule(ErrorCode.MODEL_LOADING, QueueAction.RETRY, 5),
    LoraLoading: ErrorRule(ErrorCode.LORA_LOADING, QueueAction.RETRY, 1),
    Overloaded: ErrorRule(ErrorCode.QUEUE_FULL, QueueAction.RETRY, 1),
    EngineClosed: ErrorRule(ErrorCode.MODEL_NOT_LOADED, QueueAction.RETRY, 5),
    InferenceFailed: ErrorRule(ErrorCode.INFERENCE_ERROR, QueueAction.GIVE_UP),
    ResourceExhausted: ErrorRule(ErrorCode.RESOURCE_EXHAUSTED, QueueAction.RETRY, OOM_RETRY_AFTER_S),
}

UNEXPECTED: Final = ErrorRule(ErrorCode.INTERNAL_ERROR, QueueAction.GIVE_UP)
"""What an exception outside the table becomes (its text stays in the log): kept beside the table so
``/openapi.json``, which documents every rule, documents this one too."""


INTERNAL_MESSAGE: Final = "Internal server error"


def told(exc: Exception) -> tuple[ErrorRule, str]:
    """The rule for ``exc`` and the message a caller may see: an unexpected error's text never leaves
    the process (its traceback goes to the log), every front end answers it ``INTERNAL_MESSAGE``."""
    rule = rule_for(exc)
    if rule is None:
        log.error("unhandled error", exc_info=exc)
        return UNEXPECTED, INTERNAL_MESSAGE
    return rule, str(exc)


def rule_for(exc: Exception) -> ErrorRule | None:
    """The rule of the nearest class in ``exc``'s MRO; None means an unexpected error (``UNEXPECTED``)."""
    for cls in type(exc).__mro__:
        rule = ERROR_TABLE.get(cls)
        if rule is not None:
            return rule
    return None
