"""Exceptions raised by the SDK clients.

The tree matches the public ``sie-sdk`` so ``except`` clauses written against it keep working::

    SIEError
    ├── SIEConnectionError        the server could not be reached, or the connection broke mid-request
    ├── RequestError              4xx, or a successful answer whose body breaks the contract
    │   └── InputTooLongError         400 INPUT_TOO_LONG: an input past the model's window
    ├── ServerError               5xx
    │   ├── ModelLoadFailedError      502 MODEL_LOAD_FAILED: the server recorded a failed load; never retried
    │   └── ResourceExhaustedError    503 RESOURCE_EXHAUSTED after ``max_oom_retries`` retries
    ├── ProvisioningError         no capacity yet (202 / 503 PROVISIONING) and the caller would not wait
    ├── PoolError                 resource-pool operations (kept for compatibility; pools are not implemented)
    ├── LoraLoadingError          503 LORA_LOADING after the fixed retry budget
    └── ModelLoadingError         503 MODEL_LOADING until ``provision_timeout_s`` ran out

Every constructor takes the same arguments as its public counterpart, so code that builds these
errors itself (fakes in a caller's tests, say) keeps working too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class SIEError(Exception):
    """Base class of every error the SDK raises on purpose."""


class SIEConnectionError(SIEError):
    """The request never produced an HTTP answer (refused, reset, timed out)."""


class _AnsweredError(SIEError):
    """What a server's error answer carries; shared by ``RequestError`` and ``ServerError``."""

    def __init__(
        self,
        message: str,
        code: str | None = None,
        status_code: int | None = None,
        *,
        param: str | None = None,
        request: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.status_code = status_code
        self.param = param
        self.request = request


class RequestError(_AnsweredError):
    """The server refused the request (4xx), or answered in a shape the SDK cannot read."""


class InputTooLongError(RequestError):
    """An input past the model's window, refused under ``options.overflow_policy: error`` (400
    ``INPUT_TOO_LONG``; the message names the item, its tokens and the window). A ``RequestError``,
    so 4xx handlers written before it still catch it; ``model`` is the model asked."""

    def __init__(
        self,
        message: str,
        *,
        model: str | None = None,
        param: str | None = None,
        request: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message, code="INPUT_TOO_LONG", status_code=400, param=param, request=request)
        self.model = model


class ServerError(_AnsweredError):
    """The server failed (5xx). ``retry_after`` keeps the server's hint, if it sent one."""

    def __init__(
        self,
        message: str,
        code: str | None = None,
        status_code: int | None = None,
        *,
        param: str | None = None,
        request: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, code, status_code, param=param, request=request)
        self.retry_after = retry_after


class ProvisioningError(SIEError):
    """No worker for ``gpu`` yet, and the caller asked not to wait (or the wait budget ran out)."""

    def __init__(
        self,
        message: str,
        *,
        gpu: str | None = None,
        retry_after: float | None = None,
        param: str | None = None,
        request: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.gpu = gpu
        self.retry_after = retry_after
        self.param = param
        self.request = request


class PoolError(SIEError):
    """A resource-pool operation failed; exported so public callers' handlers still import."""

    def __init__(self, message: str, *, pool_name: str | None = None, state: str | None = None) -> None:
        super().__init__(message)
        self.pool_name = pool_name
        self.state = state


class LoraLoadingError(SIEError):
    """The LoRA adapter was still loading after the fixed number of retries."""

    def __init__(
        self,
        message: str,
        *,
        lora: str | None = None,
        model: str | None = None,
        request: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.lora = lora
        self.model = model
        self.request = request


class ModelLoadingError(SIEError):
    """The model was still loading when ``provision_timeout_s`` ran out."""

    def __init__(
        self, message: str, *, model: str | None = None, request: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.model = model
        self.request = request


class ModelLoadFailedError(ServerError):
    """The server has a recorded load failure for the model (502 ``MODEL_LOAD_FAILED``).

    Raised on the first answer: the server sends no ``Retry-After`` precisely so that clients do not
    spend their loading budget on a model that will not load. ``permanent`` says whether an operator
    must act (gated repo, missing dependency) or the failure is in a cooldown that will expire.
    """

    def __init__(
        self,
        message: str,
        *,
        model: str | None = None,
        error_class: str | None = None,
        permanent: bool = True,
        attempts: int = 1,
        param: str | None = None,
        request: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message, code="MODEL_LOAD_FAILED", status_code=502, param=param, request=request)
        self.model = model
        self.error_class = error_class
        self.permanent = permanent
        self.attempts = attempts


class ResourceExhaustedError(ServerError):
    """The server stayed out of memory through every retry (503 ``RESOURCE_EXHAUSTED``).

    A ``ServerError`` so that handlers written before this class existed still catch it.
    """

    def __init__(
        self,
        message: str,
        *,
        model: str | None = None,
        retries: int = 0,
        param: str | None = None,
        request: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(
            message,
            code="RESOURCE_EXHAUSTED",
            status_code=503,
            param=param,
            request=request,
            retry_after=retry_after,
        )
        self.model = model
        self.retries = retries
