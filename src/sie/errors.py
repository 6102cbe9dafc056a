"""The root of every error a caller is told about, and the one table of what each wire code means.

Every process raises ``SieError`` subclasses: the catalogue's request checks, the engine's loading and
batching failures, the gateway's routing and publishing refusals, sie-config's API refusals. A class
names its wire ``code``; ``RULES`` says, once per code, what a queue consumer does with a work item
that raised it (answer it, retry it after ``retry_after_s``, give up) and how long a client should
wait. So one code has one ``Retry-After`` whichever front end answers it: the HTTP edge
(``sie.http.errors``) renders every one from here, the worker's queue step reads ``queue``, and
``/openapi.json`` documents the codes of the error classes each process's routes can raise.

Nothing here knows HTTP or NATS. A caller sees a code and a message; an error outside the root (a
bug, a library's exception) is ``UNEXPECTED``, and its text stays in the log.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any, ClassVar, Final

from sie.wire.codec import WireDecodeError
from sie.wire.errors import ConfigErrorCode, ErrorCode

log = logging.getLogger(__name__)

OOM_RETRY_AFTER_S: Final = 5  # the public server's default
LOADING_RETRY_AFTER_S: Final = 5  # the public server's and gateway's


class QueueAction(StrEnum):
    """What a queue consumer does with a work item that raised."""

    ANSWER = "answer"  # the request is wrong: reply with the error and ack (a retry cannot help)
    RETRY = "retry"  # transient: no reply; NAK so it is redelivered after ``retry_after_s``
    GIVE_UP = "give_up"  # the server failed it: reply with the error and ack (as the public worker does)


WireCode = ErrorCode | ConfigErrorCode


@dataclass(frozen=True)
class ErrorRule:
    code: WireCode
    queue: QueueAction
    retry_after_s: int | None = None  # when retrying makes sense: how long to wait first


_ANSWER: Final = QueueAction.ANSWER
_RETRY: Final = QueueAction.RETRY
_GIVE_UP: Final = QueueAction.GIVE_UP


_CONFIG_UNAVAILABLE: Final = (ConfigErrorCode.NATS_UNAVAILABLE, ConfigErrorCode.IDEMPOTENT_INFLIGHT_CANCELLED)


def _rules(*rules: ErrorRule) -> dict[WireCode, ErrorRule]:
    return {rule.code: rule for rule in rules}


RULES: Final[dict[WireCode, ErrorRule]] = _rules(
    ErrorRule(ErrorCode.INVALID_INPUT, _ANSWER),
    ErrorRule(ErrorCode.MODEL_NOT_FOUND, _ANSWER),
    ErrorRule(ErrorCode.MODEL_NOT_SERVED, _ANSWER),
    ErrorRule(ErrorCode.INPUT_TOO_LONG, _ANSWER),
    ErrorRule(ErrorCode.PAYLOAD_TOO_LARGE, _ANSWER),
    ErrorRule(ErrorCode.UNAUTHORIZED, _ANSWER),
    ErrorRule(ErrorCode.FORBIDDEN, _ANSWER),
    ErrorRule(ErrorCode.POOL_NOT_FOUND, _ANSWER),
    ErrorRule(ErrorCode.BUNDLE_CONFLICT, _ANSWER),
    ErrorRule(ErrorCode.MODEL_LOAD_FAILED, _GIVE_UP),
    ErrorRule(ErrorCode.MODEL_LOADING, _RETRY, LOADING_RETRY_AFTER_S),
    ErrorRule(ErrorCode.LORA_LOADING, _RETRY, 1),
    ErrorRule(ErrorCode.QUEUE_FULL, _RETRY, 1),
    ErrorRule(ErrorCode.MODEL_NOT_LOADED, _RETRY, 5),
    ErrorRule(ErrorCode.RESOURCE_EXHAUSTED, _RETRY, OOM_RETRY_AFTER_S),
    # Scale from zero: a gateway tells the client to come back while a worker starts; the wait is
    # the gateway's setting (SIE_GATEWAY_PROVISIONING_RETRY_AFTER_S), sent by the error itself.
    ErrorRule(ErrorCode.PROVISIONING, _RETRY, 120),
    # A profile this cluster does not run: no retry helps, yet it is the cluster's answer (a 503).
    ErrorRule(ErrorCode.GPU_NOT_CONFIGURED, _GIVE_UP),
    ErrorRule(ErrorCode.INFERENCE_ERROR, _GIVE_UP),
    ErrorRule(ErrorCode.MODEL_OUTPUT_PARSE_ERROR, _GIVE_UP),
    ErrorRule(ErrorCode.GENERATION_TIMEOUT, _GIVE_UP),
    ErrorRule(ErrorCode.INTERNAL_ERROR, _GIVE_UP),
    # sie-config's API (the public service's codes); its refusals never travel on a queue. The two it
    # answers 503 (NATS down, an idempotent write whose first try was cancelled) carry no wait.
    *(ErrorRule(code, _ANSWER) for code in ConfigErrorCode if code not in _CONFIG_UNAVAILABLE),
    *(ErrorRule(code, _GIVE_UP) for code in _CONFIG_UNAVAILABLE),
)


# A load that failed on one worker for a reason that may heal (a full disk, memory, the network; not
# a missing model or a bad config, which fail on every worker): a queue worker leaves the item for
# another worker (``ModelLoadFailed.rule``); the HTTP answer is the code's, without a wait.
LOAD_FAILED_HERE: Final = ErrorRule(ErrorCode.MODEL_LOAD_FAILED, _RETRY)


class SieError(Exception):
    """An error a caller is told about: its class names the wire code, ``RULES`` the rest.

    ``details`` are the fields an answer carries beside the code and the message (a failed load's
    attempts, a conflict's profiles); ``retry_after_s`` may be set per instance where the wait is a
    setting (a gateway's provisioning answer)."""

    code: ClassVar[WireCode]
    # Headers an HTTP answer to this instance carries besides the table's: remote serving says who
    # answered (``X-SIE-Served-By``, ``X-SIE-Upstream``, ``X-SIE-Fallback-*``). An instance sets its own.
    extra_headers: Mapping[str, str] = MappingProxyType({})

    def rule(self) -> ErrorRule:
        """The rule of the nearest class's code (an instance that relays another's code says its own)."""
        return RULES[self.code]

    def details(self) -> dict[str, Any]:
        return {}

    def body(self, message: str) -> dict[str, Any] | None:
        """A whole answer body of this error's own, for one whose public shape is no envelope (a
        gateway's ``gpu_not_configured``); None answers in the process's envelope."""
        return None

    @property
    def retry_after_s(self) -> int | None:
        return self.rule().retry_after_s


class Relayed(SieError):
    """An error another process answered with, passed on with its code (a worker's result, relayed by
    a gateway); an unknown code (a newer peer's) is relayed as ``INTERNAL_ERROR``."""

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.wire_code: WireCode = ErrorCode(code) if code in _ERROR_CODES else ErrorCode.INTERNAL_ERROR
        self._details = details or {}

    def rule(self) -> ErrorRule:
        return RULES[self.wire_code]

    def details(self) -> dict[str, Any]:
        return self._details


_ERROR_CODES: Final = frozenset(code.value for code in ErrorCode)

# Exceptions of lower layers that are a caller's fault, with the code they are answered with.
FOREIGN: Final[dict[type[Exception], WireCode]] = {WireDecodeError: ErrorCode.INVALID_INPUT}

UNEXPECTED: Final = RULES[ErrorCode.INTERNAL_ERROR]
"""What an exception outside the root becomes (its text stays in the log)."""

INTERNAL_MESSAGE: Final = "Internal server error"


def rule_for(exc: BaseException) -> ErrorRule | None:
    """The rule of ``exc``'s code: its own, or a lower layer's client error's (``FOREIGN``, by the
    nearest class in its MRO); None means an unexpected error (``UNEXPECTED``)."""
    if isinstance(exc, SieError):
        return exc.rule()
    for cls in type(exc).__mro__:
        code = FOREIGN.get(cls)
        if code is not None:
            return RULES[code]
    return None


def told(exc: Exception) -> tuple[ErrorRule, str]:
    """The rule for ``exc`` and the message a caller may see: an unexpected error's text never leaves
    the process (its traceback goes to the log), every front end answers it ``INTERNAL_MESSAGE``."""
    rule = rule_for(exc)
    if rule is None:
        log.error("unhandled error", exc_info=exc)
        return UNEXPECTED, INTERNAL_MESSAGE
    return rule, str(exc)


def retry_after(exc: Exception, rule: ErrorRule) -> int | None:
    """How long the caller should wait: the instance's own wait where it has one, else the rule's."""
    return exc.retry_after_s if isinstance(exc, SieError) else rule.retry_after_s
