"""What a call to an upstream can fail with, as the public server answers each.

An upstream is outside this deployment, so nothing it sent reaches the caller: every message here
is fixed text with the model and upstream names, and its status, a known error code and its
``Retry-After`` are read only to choose among these:

- ``UpstreamNotReady``: the model is loading there: 503 ``MODEL_LOADING``;
- ``UpstreamBusy``: it is busy or unreachable, or this server's own limits refused the call: 503
  ``QUEUE_FULL`` (the SDKs retry both, after the upstream's ``Retry-After`` clamped to 1-60 s);
- ``UpstreamRefusedInput``: it refused the input: 400 ``INVALID_INPUT``, or 400 ``INPUT_TOO_LONG``
  (``UpstreamInputTooLong``) when its code says the input was too long, as the public server maps it;
- ``UpstreamFailed``: anything else (a redirect, a 501, a malformed answer): 500 ``INFERENCE_ERROR``.

Each carries ``X-SIE-Served-By: remote`` and ``X-SIE-Upstream``, as the public answers do.
"""

from __future__ import annotations

from typing import Final, Literal

from sie.catalog.errors import InvalidInput
from sie.errors import SieError
from sie.wire.errors import ErrorCode

SERVED_BY: Final = "X-SIE-Served-By"
UPSTREAM: Final = "X-SIE-Upstream"
RETRY_AFTER_MIN_S: Final = 1
RETRY_AFTER_MAX_S: Final = 60

FailureKind = Literal["busy", "unavailable"]


def remote_headers(upstream: str) -> dict[str, str]:
    return {SERVED_BY: "remote", UPSTREAM: upstream}


def clamp_wait(seconds: float) -> int:
    return int(min(RETRY_AFTER_MAX_S, max(RETRY_AFTER_MIN_S, seconds)))


class _Upstream(SieError):
    def __init__(self, message: str, upstream: str, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.upstream = upstream
        self.extra_headers = remote_headers(upstream)
        self._wait = retry_after_s

    @property
    def retry_after_s(self) -> int | None:
        return self._wait if self._wait is not None else self.rule().retry_after_s


class UpstreamNotReady(_Upstream):
    code = ErrorCode.MODEL_LOADING

    def __init__(self, model: str, upstream: str, retry_after_s: int) -> None:
        super().__init__(f"Model '{model}' is loading on its upstream, please retry", upstream, retry_after_s)


class UpstreamBusy(_Upstream):
    code = ErrorCode.QUEUE_FULL

    def __init__(self, model: str, upstream: str, kind: FailureKind, retry_after_s: int) -> None:
        super().__init__(
            f"The upstream serving model '{model}' is {kind}, please retry", upstream, retry_after_s
        )
        self.kind = kind


class UpstreamFailed(_Upstream):
    code = ErrorCode.INFERENCE_ERROR

    def __init__(self, model: str, upstream: str, what: str) -> None:
        super().__init__(f"The upstream serving model '{model}' failed: {what}", upstream)


class UpstreamRefusedInput(InvalidInput):
    """The upstream refused the input; its reason is not repeated (it is the upstream's text)."""

    def __init__(self, model: str, upstream: str, why: str = "as invalid") -> None:
        super().__init__(f"The upstream serving model '{model}' refused the input {why}")
        self.upstream = upstream
        self.extra_headers = remote_headers(upstream)


class UpstreamInputTooLong(UpstreamRefusedInput):
    """The upstream refused the input with ``INPUT_TOO_LONG`` (at any status below 500 but 429):
    answered 400 ``INPUT_TOO_LONG``, which the SDKs raise as ``InputTooLongError``, as the public
    server's local window overflow is."""

    code = ErrorCode.INPUT_TOO_LONG

    def __init__(self, model: str, upstream: str) -> None:
        super().__init__(model, upstream, "as too long")
